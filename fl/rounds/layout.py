"""The masked vector's layout, owned in one place: [k weighted values at the shared index set | the FedAvg
weight (in `fresh`'s first exchange a unit weight: its sum counts the clients) | table cells (a sketch, or a
linear codec's table)], every part in fixed point in the field Z_{2^b}.
Clients quantize the parts from one generator (the weight first, then the values, then the table), the server
unpacks the masked sum.

Each part has quant_bits signed bits per client, so b = the narrowest width in which the cohort's sum cannot
wrap (or secagg.bits). The weight needs WEIGHT_BITS of precision whatever quant_bits is: it travels as
digits of quant_bits - 1 bits (non-negative, so each digit's sum is exact and the server recombines them).
"""
from __future__ import annotations

import numpy as np

import secagg

WEIGHT_BITS = 15  # the FedAvg weight's precision: max_weight / (2^15 - 1)


class MaskedLayout:
    def __init__(self, plan, k: int, cells: int, quant_bits: int | None = None, table_clip: float | None = None):
        q = int(quant_bits or plan.quant_bits)
        self.k, self.cells, self.quant_bits = k, cells, q
        self.bits = plan.field_for(q)
        self.digit_bits = q - 1
        self.digits = -(-WEIGHT_BITS // self.digit_bits)
        self.length = k + self.digits + cells
        n = plan.max_clients
        self.q_values = secagg.FixedPointQuantizer(plan.clip, n, self.bits, q)
        self.q_table = secagg.FixedPointQuantizer(plan.sketch_clip if table_clip is None else table_clip, n,
                                                  self.bits, q)
        self.q_digit = secagg.FixedPointQuantizer(1.0, n, self.bits, q)  # lifts digit sums
        self.max_weight = float(plan.max_weight)
        self.weight_scale = (2**WEIGHT_BITS - 1) / plan.max_weight

    def weight(self, w: float, rng: np.random.Generator) -> np.ndarray:
        """The weight, stochastically rounded to WEIGHT_BITS (unbiased), as base-2^(quant_bits-1) digits."""
        scaled = min(max(float(w), 0.0), (2**WEIGHT_BITS - 1) / self.weight_scale) * self.weight_scale
        whole = int(np.floor(scaled))
        # scaled may pass 2^15 - 1 by an ulp: 2^15 does not fit WEIGHT_BITS (a single 15-bit digit reads 0)
        whole = min(whole + int(rng.random() < scaled - whole), 2**WEIGHT_BITS - 1)
        mask = (1 << self.digit_bits) - 1
        return np.array([(whole >> (self.digit_bits * j)) & mask for j in range(self.digits)], np.uint32)

    def counts(self, summed: float, clients: int) -> bool:
        """Whether a sum of unit weights (`weight(1.0)` from each client) holds `clients` of them: each is
        rounded by less than one step of the weight's precision."""
        unit = min(1.0, self.max_weight)
        return abs(summed - clients * unit) <= clients / self.weight_scale

    def values(self, weighted: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The quantized weighted values and what they stand for (clipping and rounding included)."""
        return self.q_values.quantize_with_error(weighted, rng)

    def table(self, table: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.q_table.quantize(table.ravel(), rng)

    def join(self, values: np.ndarray | None, weight: np.ndarray, table: np.ndarray | None) -> np.ndarray:
        parts = [p for p in (values, weight, table) if p is not None]
        vector = np.concatenate(parts)
        if len(vector) != self.length:
            raise ValueError(f"masked vector of {len(vector)} elements, the layout has {self.length}")
        return vector

    def unpack(self, total: np.ndarray, mean: bool = True) -> tuple[np.ndarray | None, float, np.ndarray | None]:
        """(mean values at the index set (None if the summed weight is not positive), summed weight, summed table
        cells or None) of a field sum; `mean=False`: the summed weighted values themselves (fl.aggregation=memory
        adds them to its sum). ValueError if `total` is not the layout's length."""
        if len(total) != self.length:
            raise ValueError(f"masked sum of {len(total)} elements, the layout has {self.length}")
        k, d = self.k, self.digits
        sums = self.q_digit.lift(total[k:k + d])  # each digit's sum, exact
        weight = float(sum(int(s) << (self.digit_bits * j) for j, s in enumerate(sums))) / self.weight_scale
        if not mean:
            values = self.q_values.dequantize(total[:k])
        else:
            values = (self.q_values.dequantize(total[:k]) / weight).astype(np.float32) if weight > 0 else None
        cells = self.q_table.dequantize(total[k + d:]).astype(np.float32) if self.cells else None
        return values, weight, cells
