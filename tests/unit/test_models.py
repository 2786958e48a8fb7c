"""The trainable models and the registry: shapes the runtime relies on, identity at init, state shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from export.distill import warm_start
from export.models import (
    ARCHITECTURES,
    MODEL_ATTRIBUTES,
    Conv3dEnhancer,
    ConvGRUEnhancer,
    ConvLSTMEnhancer,
    MotionAdaptiveTemporalFilter,
    architecture_of,
    build,
)
from export.models.conv3d import activation
from export.models.convlstm import BLEND_BIAS
from export.objective import LUMA_WEIGHTS, count_macs, delivered_420, psnr, training_loss, zero_states
from streamer.backend.base import Layout
from streamer.core.windower import OutputPosition
from streamer.errors import ConfigError

TINY_CONV3D = {"embed": 4, "features": 8, "channels": 8, "blocks": 1}
TINY_GRU = {"features": 8, "channels": 8, "hidden": 6, "blocks": 1}
TINY_LSTM = {"embed": 4, "features": 8, "channels": 8, "hidden": 6, "blocks": 1}


def padded(v: int, m: int) -> int:
    return -(-v // m) * m


@pytest.mark.parametrize("t", [1, 3, 5])
@pytest.mark.parametrize(("h", "w"), [(17, 23), (36, 52), (5, 9)])
def test_conv3d_returns_the_target_frame_shape_for_padded_odd_sizes(t: int, h: int, w: int) -> None:
    model = Conv3dEnhancer(t=t, **TINY_CONV3D)
    hp, wp = padded(h, model.pad_multiple), padded(w, model.pad_multiple)
    out = model(torch.rand(2, t, 3, hp, wp))
    assert out.shape == (2, 3, hp, wp)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(("position", "slot"), [(OutputPosition.CENTER, 2), (OutputPosition.LAST, 4)])
def test_untrained_conv3d_is_close_to_the_identity_on_its_output_slot(
    position: OutputPosition, slot: int
) -> None:
    torch.manual_seed(0)
    model = Conv3dEnhancer(t=5, position=position).eval()
    x = torch.rand(1, 5, 3, 32, 48)
    with torch.no_grad():
        out = model(x)
    assert (out - x[:, slot]).abs().max() < 0.05
    # Far from the other slots: the residual is on the right frame.
    other = 0 if slot else 4
    assert (out - x[:, other]).abs().mean() > 0.2


def test_conv3d_uses_the_other_frames_of_the_window() -> None:
    torch.manual_seed(0)
    model = Conv3dEnhancer(t=5, **TINY_CONV3D).eval()
    x = torch.rand(1, 5, 3, 16, 16)
    y = x.clone()
    y[:, 0] = 0.0
    with torch.no_grad():
        assert not torch.equal(model(x), model(y))


@pytest.mark.parametrize("t", [1, 5])
def test_conv3d_with_a_strength_starts_as_the_model_without_and_learns_to_use_it(t: int) -> None:
    torch.manual_seed(0)
    plain = Conv3dEnhancer(t=t, **TINY_CONV3D).eval()
    model = Conv3dEnhancer(t=t, strength=True, **TINY_CONV3D).eval()
    assert (plain.takes_strength, model.takes_strength) == (False, True)
    copied = warm_start(model, plain.state_dict())
    assert not any(name.startswith("condition.") for name in copied)
    x = torch.rand(2, t, 3, 16, 24)
    strengths = torch.tensor([[0.5], [25.0]])
    with torch.no_grad():
        torch.testing.assert_close(model(x, strengths), plain(x))
        for p in model.condition.parameters():  # type: ignore[union-attr]
            p.add_(0.1)
        moved = model(x, strengths)
        # Once trained, the same frames at another strength give another output.
        assert not torch.allclose(moved[0], model(x, strengths.flip(0))[0])
    assert build("conv3d", **model.config()).takes_strength


def test_conv3d_fine_blocks_start_as_the_model_without_and_are_kept_in_its_config() -> None:
    torch.manual_seed(0)
    plain = Conv3dEnhancer(t=1, strength=True, **TINY_CONV3D).eval()
    model = Conv3dEnhancer(t=1, strength=True, fine=2, **TINY_CONV3D).eval()
    copied = warm_start(model, plain.state_dict())
    assert copied
    assert not any(name.startswith("fine.") for name in copied)
    x = torch.rand(2, 1, 3, 16, 24)
    strengths = torch.tensor([[0.5], [25.0]])
    with torch.no_grad():
        torch.testing.assert_close(model(x, strengths), plain(x, strengths))
        for p in model.fine.parameters():
            p.add_(0.1)
        assert not torch.allclose(model(x, strengths), plain(x, strengths))
    assert "fine" not in plain.config()
    assert model.config()["fine"] == 2
    assert build("conv3d", **model.config()).fine_blocks == 2


def test_convlstm_with_a_strength_starts_as_the_model_without_and_takes_a_per_frame_models_conditioning() -> (
    None
):
    torch.manual_seed(0)
    plain = ConvLSTMEnhancer(**TINY_LSTM).eval()
    model = ConvLSTMEnhancer(strength=True, **TINY_LSTM).eval()
    warm_start(model, plain.state_dict())
    x = torch.rand(2, 1, 3, 16, 24)
    strengths = torch.tensor([[1.0], [30.0]])
    ours, theirs = zero_states(model, x), zero_states(plain, x)
    with torch.no_grad():
        for _ in range(3):  # the strength goes last, after the states, at every step
            out, *ours = model(x, *ours, strengths)
            expected, *theirs = plain(x, *theirs)
            torch.testing.assert_close(out, expected)
    per_frame = Conv3dEnhancer(t=1, strength=True, **TINY_CONV3D)
    assert {n for n in warm_start(model, per_frame.state_dict()) if n.startswith("condition.")} == {
        "condition.0.weight",
        "condition.0.bias",
        "condition.2.weight",
        "condition.2.bias",
    }
    assert build("convlstm", **model.config()).takes_strength


def test_conv3d_refuses_a_strength_it_was_not_built_for_and_needs_one_it_was() -> None:
    x = torch.rand(1, 1, 3, 8, 8)
    with pytest.raises(ConfigError, match="strength exactly when built with strength=True"):
        Conv3dEnhancer(t=1, **TINY_CONV3D)(x, torch.ones(1, 1))
    with pytest.raises(ConfigError, match=r"\(this one: True\); pass one per window"):
        Conv3dEnhancer(t=1, strength=True, **TINY_CONV3D)(x)


@pytest.mark.parametrize(("h", "w"), [(16, 24), (36, 52), (4, 4)])
def test_convgru_state_has_the_declared_shape_and_feeds_the_next_call(h: int, w: int) -> None:
    torch.manual_seed(0)
    model = ConvGRUEnhancer(**TINY_GRU).eval()
    (spec,) = model.state_specs
    x = torch.rand(2, 1, 3, h, w)
    state = model.initial_state(x)
    assert state.shape == (2, spec.channels, -(-h // spec.scale), -(-w // spec.scale))
    assert not state.any()
    with torch.no_grad():
        out, nxt = model(x, state)
        again, _ = model(x, nxt)
    assert out.shape == (2, 3, h, w)
    assert nxt.shape == state.shape
    assert nxt.abs().max() > 0
    assert not torch.equal(out, again)  # the state carries something from one frame to the next


def test_untrained_convgru_is_close_to_the_identity() -> None:
    torch.manual_seed(0)
    model = ConvGRUEnhancer().eval()
    x = torch.rand(1, 1, 3, 32, 48)
    with torch.no_grad():
        out, _ = model(x, model.initial_state(x))
    assert (out - x[:, 0]).abs().max() < 0.05


@pytest.mark.parametrize(("h", "w"), [(16, 24), (36, 52), (4, 4)])
def test_convlstm_carries_hidden_cell_and_the_previous_frame_in_the_declared_shapes(h: int, w: int) -> None:
    torch.manual_seed(0)
    model = ConvLSTMEnhancer(**TINY_LSTM).eval()
    with torch.no_grad():  # the recurrence starts switched off (tested below); here it must carry
        model.embed_previous.weight.normal_(std=0.1)
        model.merge.weight.normal_(std=0.1)
    assert [(s.input, s.output, s.channels, s.scale) for s in model.state_specs] == [
        ("hidden", "hidden_next", 6, 4),
        ("cell", "cell_next", 6, 4),
        ("previous", "previous_next", 4, 1),
    ]
    x = torch.rand(2, 1, 3, h, w)
    states = zero_states(model, x)
    quarter = (2, 6, -(-h // 4), -(-w // 4))
    assert [tuple(s.shape) for s in states] == [quarter, quarter, (2, 4, h, w)]
    with torch.no_grad():
        out, *after = model(x, *states)
        again, *_ = model(x, *after)
    assert out.shape == (2, 3, h, w)
    assert [s.shape for s in after] == [s.shape for s in states]
    hidden, cell, previous = after
    assert hidden.abs().max() > 0
    assert cell.abs().max() > 0
    # The previous frame is the output (clipped) and a plane of ones: "a frame was enhanced".
    assert torch.equal(previous[:, :3], out.clamp(0, 1))
    assert torch.equal(previous[:, 3], torch.ones(2, h, w))
    assert not torch.equal(out, again)


def test_convlstm_from_the_per_frame_weights_is_the_per_frame_model_until_trained() -> None:
    torch.manual_seed(0)
    per_frame = Conv3dEnhancer(t=1, position=OutputPosition.LAST, **TINY_CONV3D).eval()
    model = ConvLSTMEnhancer(**TINY_CONV3D).eval()
    copied = warm_start(model, dict(per_frame.state_dict()))
    assert set(copied) == set(per_frame.state_dict())
    x = torch.rand(1, 1, 3, 32, 48)
    hidden, cell, previous = zero_states(model, x)
    stale = previous.clone()
    stale[:, :3] = torch.rand(1, 3, 32, 48)  # colour left in the state, but its valid plane says none
    with torch.no_grad():
        expected = per_frame(x)
        out, *_ = model(x, hidden, cell, previous)
        ignored, *_ = model(x, hidden, cell, stale)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    assert torch.equal(out, ignored)


def test_convlstm_blends_in_the_previous_frame_where_it_is_close_and_never_where_it_changed() -> None:
    torch.manual_seed(0)
    model = ConvLSTMEnhancer().eval()
    x = torch.full((1, 1, 3, 16, 16), 0.2)
    hidden, cell, previous = zero_states(model, x)

    def after(value: float) -> torch.Tensor:
        before = torch.cat([torch.full((1, 3, 16, 16), value), torch.ones(1, 1, 16, 16)], dim=1)
        with torch.no_grad():
            out, *_ = model(x, hidden, cell, before)
        return out

    with torch.no_grad():
        alone, *_ = model(x, hidden, cell, previous)
    # Close to the previous frame (0.05 off, a quarter of the guard): sigmoid(BLEND_BIAS) of it, faded
    # by the change to three quarters.
    weight = torch.sigmoid(torch.tensor(BLEND_BIAS)) * (1 - (0.25 - alone).abs() / model.guard)
    assert (after(0.25) - (alone + weight * (0.25 - alone))).abs().max() < 1e-3
    # A change of the guard or more (a block flipping from dark to light) takes nothing of it.
    assert torch.equal(after(0.8), alone)


def test_convlstm_graph_rewrites_compute_what_its_layers_say() -> None:
    """The forward folds the previous frame's centring into embed_previous and runs head and blend as
    one convolution, for speed; with every weight random it is still the layers applied as named."""
    h, w = 20, 28
    torch.manual_seed(0)
    model = ConvLSTMEnhancer(**TINY_LSTM).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.2)
    x = torch.rand(2, 1, 3, h, w)
    hidden, cell = torch.randn(2, 6, h // 4, w // 4), torch.randn(2, 6, h // 4, w // 4)
    previous = torch.cat([torch.rand(2, 3, h, w), torch.ones(2, 1, h, w)], dim=1)
    previous[1] = 0  # the zero state beside a carried one
    m = model
    with torch.no_grad():
        out, hidden_next, cell_next, previous_next = model(x, hidden, cell, previous)
        frame, before, valid = x[:, 0], previous[:, :3], previous[:, 3:]
        embedded = F.conv2d(frame - 0.5, m.embed.weight.reshape(4, 3, 2, 2), m.embed.bias, stride=2)
        embedded = embedded + m.embed_previous(torch.cat([(before - 0.5) * valid, valid], dim=1))
        half = activation(m.fuse(embedded[:, :, None])[:, :, 0])
        quarter = activation(m.down(half))
        i, f, o, g = m.gates(torch.cat([quarter, hidden], dim=1)).chunk(4, dim=1)
        c = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
        hid = torch.sigmoid(o) * torch.tanh(c)
        quarter = m.body(m.merge(torch.cat([quarter, hid], dim=1)))
        y = activation(m.refine(activation(half + F.pixel_shuffle(m.up(quarter), 2))))
        current = frame + F.pixel_shuffle(m.head(y), 2)
        still = (1 - (current - before).abs().amax(dim=1, keepdim=True) / m.guard).clamp(0, 1)
        weight = torch.sigmoid(F.pixel_shuffle(m.blend(y), 2)) * valid * still
        expected = current + weight * (before - current)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(hidden_next, hid, atol=1e-5, rtol=0)
    torch.testing.assert_close(cell_next, c, atol=1e-5, rtol=0)
    torch.testing.assert_close(previous_next, torch.cat([out.clamp(0, 1), torch.ones_like(valid)], 1))


def test_count_macs_counts_the_convolutions_applied_as_functions_too() -> None:
    """conv3d's embedding and Conv3d run as one F.conv2d of weights composed in the forward; the count
    once missed the functional convolutions."""
    t, h, w = 3, 16, 32
    model = Conv3dEnhancer(t=t, **TINY_CONV3D).eval()
    half, quarter = h * w // 4, h * w // 16
    expected = (
        8 * t * 3 * 36 * half  # the entry: embedding and Conv3d as one 6x6 stride-2 convolution
        + 8 * 9 * half  # the embedding's bias inside the frame: a 3x3 convolution of ones
        + 8 * 8 * 9 * quarter  # down
        + 2 * 8 * 8 * 9 * quarter  # one residual block
        + (8 + 1) * 32 * quarter  # up, transposed, its bias through a channel of ones
        + 8 * 8 * 9 * half  # refine
        + 8 * 12 * 9 * half  # head
    )
    # and the composition of the entry's weights (8 x T x 4 x 9 taps of the 12 space-to-depth inputs,
    # and of the bias): a constant per call, which onnxruntime folds when it loads the file
    assert expected < count_macs(model, (torch.rand(1, t, 3, h, w),)) <= expected + 8 * t * 4 * 9 * 13


def test_convlstm_gates_start_with_a_forget_bias_of_one() -> None:
    model = ConvLSTMEnhancer(hidden=5)
    bias = model.gates.bias.detach()
    assert torch.equal(bias[5:10], torch.ones(5))  # gates i, f, o, g: f is the second
    assert not bias[:5].eq(1).all()


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_every_architecture_exposes_what_the_exporter_reads(name: str) -> None:
    model = build(name)
    for attr in MODEL_ATTRIBUTES:
        assert hasattr(model, attr), attr
    assert isinstance(model.layout, Layout)
    assert isinstance(model.output_position, OutputPosition)
    assert model.value_range == (0.0, 1.0)
    assert architecture_of(model) == name
    rebuilt = build(name, **model.config())
    assert rebuilt.config() == model.config()


def test_registry_builds_with_string_positions_and_records_them() -> None:
    model = build("conv3d", t=3, position="last", **TINY_CONV3D)
    assert model.output_position is OutputPosition.LAST
    assert model.config()["position"] == "last"
    assert MotionAdaptiveTemporalFilter(t=3).state_specs == ()
    assert ConvGRUEnhancer().t == 1
    assert ConvGRUEnhancer().output_position is OutputPosition.LAST
    assert (ConvLSTMEnhancer().t, ConvLSTMEnhancer().output_position) == (1, OutputPosition.LAST)


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("resnet", {}, r"unknown architecture 'resnet'; choose one of \['conv3d', 'convgru'"),
        ("conv3d", {"position": "middle"}, r"position 'middle' is not one of center \| last"),
        ("conv3d", {"widht": 3}, r"architecture 'conv3d' does not take arguments \['widht'\]"),
        ("conv3d", {"t": 0}, r"Conv3dEnhancer needs t, embed, features, channels >= 1"),
        ("conv3d", {"fine": -1}, r"blocks, fine >= 0; got .*fine=-1"),
    ],
)
def test_registry_errors_name_the_bad_input(name: str, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build(name, **kwargs)


def test_the_l2_loss_is_the_squared_error_psnr_scores_and_each_loss_is_zero_at_the_target() -> None:
    target = torch.linspace(0.0, 1.0, 48).reshape(1, 3, 4, 4)
    output = (target + 0.1 * torch.sin(torch.arange(48.0)).reshape(1, 3, 4, 4)).clamp(0.0, 1.0)
    mse = float(((output - target) ** 2).mean())
    assert float(training_loss("l2", output, target)) == pytest.approx(mse)
    assert psnr(output, target) == pytest.approx(-10.0 * torch.log10(torch.tensor(mse)).item(), abs=1e-4)
    assert float(training_loss("l1", output, target)) == pytest.approx(float((output - target).abs().mean()))
    assert float(training_loss("l1", target, target)) == float(training_loss("l2", target, target)) == 0.0
    assert float(training_loss("charbonnier", target, target)) == pytest.approx(1e-3)  # its epsilon's root


def luma(frames: torch.Tensor) -> torch.Tensor:
    weights = torch.tensor(LUMA_WEIGHTS).reshape(3, 1, 1)
    return (frames * weights).sum(dim=-3)


def test_the_delivered_picture_keeps_each_pixels_luma_and_each_blocks_mean_colour() -> None:
    frames = torch.rand(2, 3, 3, 8, 12)  # (B, T, C, H, W)
    shown = delivered_420(frames)
    assert shown.shape == frames.shape
    torch.testing.assert_close(luma(shown), luma(frames))
    colour = frames - luma(frames).unsqueeze(-3)
    block = colour[..., 2:4, 6:8].mean(dim=(-2, -1), keepdim=True)
    torch.testing.assert_close(
        shown[..., 2:4, 6:8] - luma(shown)[..., 2:4, 6:8].unsqueeze(-3), block.expand(-1, -1, -1, 2, 2)
    )
    torch.testing.assert_close(delivered_420(shown), shown)  # a 4:2:0 picture is delivered as it is


def test_a_loss_on_the_delivered_picture_gives_no_credit_for_colour_finer_than_a_block() -> None:
    target = torch.rand(1, 3, 8, 8)
    fine = torch.zeros(1, 3, 8, 8)
    fine[:, :, 0::2, 0::2], fine[:, :, 1::2, 1::2] = 0.1, 0.1  # a checker inside every block
    fine[:, :, 0::2, 1::2], fine[:, :, 1::2, 0::2] = -0.1, -0.1
    fine[:, 1] = -(LUMA_WEIGHTS[0] * fine[:, 0] + LUMA_WEIGHTS[2] * fine[:, 2]) / LUMA_WEIGHTS[1]  # no luma
    output = target + fine
    assert float(training_loss("l2", output, target)) > 0.001
    assert float(training_loss("l2", output, target, "yuv420")) == pytest.approx(
        float(training_loss("l2", target, target, "yuv420"))
    )
