"""Dump manifests that break several cross-reference rules at once: which fault a reader names then
depends on the order of the rules, which the C readers, the rule expressions and the Python checks
must share (tests/test_c_readers.py, tests/test_rule_expressions.py)."""

from __future__ import annotations

import random


def faulty_manifest(rng: random.Random) -> bytes:
    """A dump manifest with one to four faults of the cross references (the order of the rules decides which
    one is named), among them every fault of dump-manifest.dimension and nested-shapes."""
    from inert.conformance._vectors_dump_manifest import manifest_file, representative

    huge = rng.choice((1 << 63, (1 << 64) - 1))
    edits = [
        lambda m: m["fields"][0]["layout"].update(shape=[2, huge]),
        lambda m: m["fields"][1]["layout"].update(ndim=rng.choice((0, 2))),
        lambda m: m["fields"][rng.randrange(3)].update(name="ids"),
        lambda m: m["keys"][rng.randrange(3)].update(key="a"),
        lambda m: m["keys"][rng.randrange(3)].update(fields=rng.choice(([1, 0], [0, 3], [2, 1], [1]))),
        lambda m: m["keys"][rng.randrange(3)].update(fields=rng.choice(([0], [0, 2], []))),
        lambda m: m["keys"][rng.randrange(3)].update(nested_shapes=rng.choice(([], [[1], [2]], [[1, 2]], [[]]))),
        lambda m: m["keys"][rng.randrange(3)]["nested_shapes"].append([huge, 1][: rng.randrange(1, 3)]),
        lambda m: m["keys"][rng.randrange(3)].update(nested_shapes=[[rng.choice((0, huge))]]),
        lambda m: m["shards"][rng.randrange(2)].update(file=rng.choice(("MANIFEST", "rows-1.ids", ".x"))),
        lambda m: m["shards"][1].update(rows=[rng.choice((0, 1, 5))]),
        lambda m: m["shards"][0].update(offsets=[64, rng.choice((256, 320, 0))]),
    ]
    m = representative()
    m["fields"].append({"name": "pixels", "layout": {"kind": "NESTED", "dtype": "UINT8", "ndim": 3}})
    m["keys"][2].update(fields=[0, 1, 2, 3], nested_shapes=[[0], [2, 2, 3]])
    for edit in rng.sample(edits, rng.randint(1, 4)):
        edit(m)
    return manifest_file(m).data
