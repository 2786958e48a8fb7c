"""The model contract's keys are spelled in one module (``streamer.contract.keys``): a key written by the
exporter and read by the runtime cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

from streamer.contract import NAMESPACE, Key

ROOT = Path(__file__).parents[2]


def test_no_module_but_the_contract_spells_a_streamer_key() -> None:
    literal = re.compile(r"""["']streamer\.""")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("streamer", "export")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "streamer" / "contract" / "keys.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []


def test_every_key_is_in_the_namespace_and_distinct() -> None:
    keys = [value for name, value in vars(Key).items() if name.isupper()]
    assert all(k.startswith(NAMESPACE) for k in keys)
    assert len(set(keys)) == len(keys) > 15
