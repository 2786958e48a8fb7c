"""``python -m export.gpu_reference`` runs on a GPU machine; here it must say so in one line, not fail."""

from __future__ import annotations

import pytest
import torch

from export.gpu_reference import main


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_a_cuda_device_it_says_where_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--sizes", "64x48", "--batches", "1"]) == 2
    assert "no CUDA device for torch here; this yardstick runs on a GPU machine" in capsys.readouterr().err


def test_an_unknown_dtype_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SystemExit):
        main(["--dtypes", "fp16,int4"])
    assert "--dtypes: unknown ['int4']; choose from fp32, fp16, bf16" in capsys.readouterr().err
