"""`DataProto`: the batch that travels between the driver and the workers (verl/protocol.py's name).

    DataProto(batch={"input_ids": [B, T], ...},        tensors, one batch dimension B shared by all
              non_tensor_batch={"prompts": [B strs]},   per-row Python objects (texts)
              meta_info={"temperature": 1.0})           per-batch facts, not split

`chunk(n)` cuts it into n contiguous pieces (one per rank), `concat` puts the pieces back in order,
`union` adds another batch's columns (a clash must be the same value), `pop` / `select` take columns
out. Every mismatch is one `ValueError` line naming the column. verl builds on `tensordict`; here a
plain dict of tensors is enough, and keeps the dispatch logic — what the package teaches — in view.

**Left padding across ranks.** verl pads every prompt to `max_prompt_length` before it travels. Here
each rank pads its own prompts to its own longest, as each `torchrun` process does, so two ranks'
`prompt_ids` (and the columns over the whole sequence) can differ in width. A batch names those
columns in `meta_info[LEFT_PAD]` ({column: pad value}) and its mask in `meta_info[LEFT_PAD_MASK]`:
`concat` pads them on the left to the widest piece, and `trim_left_pad` takes off the columns that
every row of a chunk pads, which gives each rank back the very tensors it made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

LEFT_PAD = "left_pad"
"""meta_info key: {column: pad value} of the columns whose dimension 1 is left-padded per piece."""
LEFT_PAD_MASK = "left_pad_mask"
"""meta_info key: the boolean column (True = a real token) that says where the left padding ends."""


@dataclass
class DataProto:
    """Tensors with one batch dimension, per-row objects and per-batch meta information."""

    batch: dict[str, Tensor] = field(default_factory=dict)
    non_tensor_batch: dict[str, list] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sizes = {k: v.shape[0] for k, v in self.batch.items()} | {k: len(v) for k, v in self.non_tensor_batch.items()}
        if len(set(sizes.values())) > 1:
            first = next(iter(sizes))
            other = next(k for k, n in sizes.items() if n != sizes[first])
            raise ValueError(f"DataProto: column {other!r} has {sizes[other]} rows, {first!r} has {sizes[first]}")
        self.non_tensor_batch = {k: list(v) for k, v in self.non_tensor_batch.items()}

    def __len__(self) -> int:
        for v in self.batch.values():
            return v.shape[0]
        for v in self.non_tensor_batch.values():
            return len(v)
        return 0

    def keys(self) -> list[str]:
        return [*self.batch, *self.non_tensor_batch]

    def chunk(self, n: int) -> list[DataProto]:
        """n contiguous pieces of equal size, in order (rank r gets rows r·B/n … (r+1)·B/n − 1)."""
        if n < 1 or len(self) % n:
            raise ValueError(f"DataProto.chunk: {len(self)} rows do not split into {n} equal chunks")
        size = len(self) // n
        return [self.slice(i * size, (i + 1) * size) for i in range(n)]

    def slice(self, start: int, stop: int) -> DataProto:
        return DataProto({k: v[start:stop] for k, v in self.batch.items()},
                         {k: v[start:stop] for k, v in self.non_tensor_batch.items()}, dict(self.meta_info))

    @staticmethod
    def concat(pieces: Sequence[DataProto]) -> DataProto:
        """The pieces' rows one after another (the inverse of `chunk`); every piece has the same
        columns, and the first piece's meta_info is kept. A column some piece names in
        `meta_info[LEFT_PAD]` is padded on the left to the widest piece's width."""
        if not pieces:
            raise ValueError("DataProto.concat: no pieces")
        keys = pieces[0].keys()
        left_pad = {k: v for p in pieces for k, v in p.meta_info.get(LEFT_PAD, {}).items()}
        for i, p in enumerate(pieces):
            if p.keys() != keys:
                raise ValueError(f"DataProto.concat: piece {i} has columns {p.keys()}, piece 0 has {keys}")
            for k, v in p.batch.items():
                first = pieces[0].batch[k].shape
                if v.shape[1:] != first[1:] and not (k in left_pad and v.dim() == len(first) >= 2
                                                     and v.shape[2:] == first[2:]):
                    raise ValueError(f"DataProto.concat: column {k!r} is {tuple(v.shape[1:])} per row in piece {i}, "
                                     f"{tuple(first[1:])} in piece 0")
        meta = dict(pieces[0].meta_info)
        if left_pad:
            meta[LEFT_PAD] = left_pad
        return DataProto({k: torch.cat(pad_left([p.batch[k] for p in pieces], left_pad.get(k))) for k in pieces[0].batch},
                         {k: [x for p in pieces for x in p.non_tensor_batch[k]] for k in pieces[0].non_tensor_batch},
                         meta)

    def trim_left_pad(self) -> DataProto:
        """This batch without the leading columns that every row pads (`meta_info[LEFT_PAD]`'s
        columns, read off the mask `meta_info[LEFT_PAD_MASK]`): a rank's chunk of a batch `concat`
        padded to a wider rank's width comes back as the rank made it. Without both keys, itself."""
        left_pad, mask_key = self.meta_info.get(LEFT_PAD), self.meta_info.get(LEFT_PAD_MASK)
        if not left_pad or mask_key not in self.batch or not len(self):
            return self
        mask = self.batch[mask_key].bool()
        k = int((~mask).int().cumprod(dim=1).sum(dim=1).min())  # the fewest leading pads of any row
        if k == 0:
            return self
        return DataProto({c: v[:, k:] if c in left_pad else v for c, v in self.batch.items()},
                         self.non_tensor_batch, dict(self.meta_info))

    def union(self, other: DataProto) -> DataProto:
        """This batch with `other`'s columns added (in place, and returned). Both have the same rows;
        a column or meta key in both must hold the same value."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"DataProto.union: {len(other)} rows into a batch of {len(self)}")
        for k, v in other.batch.items():
            if k in self.batch and not torch.equal(self.batch[k], v):
                raise ValueError(f"DataProto.union: column {k!r} is in both batches with different values")
            self.batch[k] = v
        for k, v in other.non_tensor_batch.items():
            if k in self.non_tensor_batch and self.non_tensor_batch[k] != v:
                raise ValueError(f"DataProto.union: column {k!r} is in both batches with different values")
            self.non_tensor_batch[k] = list(v)
        for k, v in other.meta_info.items():
            if k in self.meta_info and self.meta_info[k] != v:
                raise ValueError(f"DataProto.union: meta_info {k!r} is {self.meta_info[k]!r} here, {v!r} there")
            self.meta_info[k] = v
        return self

    def select(self, keys: Iterable[str]) -> DataProto:
        """A batch of only these columns (the tensors shared, not copied)."""
        keys = list(keys)
        self._check_keys(keys, "select")
        return DataProto({k: self.batch[k] for k in keys if k in self.batch},
                         {k: self.non_tensor_batch[k] for k in keys if k in self.non_tensor_batch}, dict(self.meta_info))

    def pop(self, keys: Iterable[str]) -> DataProto:
        """These columns, removed from this batch and returned as a batch of their own."""
        out = self.select(keys)
        for k in out.keys():
            self.batch.pop(k, None)
            self.non_tensor_batch.pop(k, None)
        return out

    def _check_keys(self, keys: list[str], who: str) -> None:
        missing = [k for k in keys if k not in self.batch and k not in self.non_tensor_batch]
        if missing:
            raise ValueError(f"DataProto.{who}: no column {missing[0]!r} (columns: {', '.join(self.keys())})")


def pad_left(tensors: list[Tensor], value: float | int | bool | None) -> list[Tensor]:
    """Each tensor padded on the left of dimension 1 with `value` to the widest one (`None`: as they are)."""
    if value is None:
        return tensors
    width = max(t.shape[1] for t in tensors)
    return [t if t.shape[1] == width else F.pad(t, (0, 0) * (t.dim() - 2) + (width - t.shape[1], 0), value=value)
            for t in tensors]
