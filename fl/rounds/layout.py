"""The masked vector's layout, owned in one place: [k weighted values at the shared index set | the FedAvg
weight | sketch cells], each part in fixed point in Z_{2^32}. Clients quantize the parts (in this order,
from one generator), the server unpacks the masked sum."""
from __future__ import annotations

import numpy as np


class MaskedLayout:
    def __init__(self, plan, k: int, cells: int):
        self.k, self.cells = k, cells
        self.length = k + 1 + cells
        self.q_values, self.q_weight, self.q_sketch = plan.quantizers()

    def weight(self, w: float, rng: np.random.Generator) -> np.ndarray:
        return self.q_weight.quantize(np.array([w], np.float32), rng)

    def values(self, weighted: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The quantized weighted values and what they stand for (clipping and rounding included)."""
        return self.q_values.quantize_with_error(weighted, rng)

    def sketch(self, table: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.q_sketch.quantize(table.ravel(), rng)

    def join(self, values: np.ndarray | None, weight: np.ndarray, sketch: np.ndarray | None) -> np.ndarray:
        parts = [p for p in (values, weight, sketch) if p is not None]
        vector = np.concatenate(parts)
        if len(vector) != self.length:
            raise ValueError(f"masked vector of {len(vector)} elements, the layout has {self.length}")
        return vector

    def unpack(self, total: np.ndarray) -> tuple[np.ndarray, float, np.ndarray | None]:
        """(mean values at the index set, summed weight, summed sketch cells or None) of a field sum."""
        if len(total) != self.length:
            raise ValueError(f"masked sum of {len(total)} elements, the layout has {self.length}")
        weight = float(self.q_weight.dequantize(total[self.k:self.k + 1])[0])
        values = (self.q_values.dequantize(total[:self.k]) / weight).astype(np.float32) if weight > 0 else None
        cells = self.q_sketch.dequantize(total[self.k + 1:]).astype(np.float32) if self.cells else None
        return values, weight, cells
