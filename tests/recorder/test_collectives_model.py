"""What each torch version's process group does (CommModel), and the op table."""

from __future__ import annotations

import pytest
import torch

from npusan.recorder.collectives import OUT, SPECS, CommModel, parse_version


@pytest.mark.parametrize(
    "version, env, on_current, record_streams",
    [
        ("2.4.1+cu121", {}, False, True),
        ("2.7.0", {}, False, True),
        ("2.7.0", {"TORCH_NCCL_AVOID_RECORD_STREAMS": "1"}, False, False),
        ("2.8.0", {}, True, False),
        ("2.13.0+cpu", {"TORCH_NCCL_AVOID_RECORD_STREAMS": "0"}, True, False),
        ("2.13.0", {"NPUSAN_C10D_MODEL": "2.6"}, False, True),
    ],
)
def test_model_per_torch_version(version, env, on_current, record_streams):
    m = CommModel.for_torch(version, env)
    assert (m.sync_on_current_stream, m.record_streams) == (on_current, record_streams)


def test_parse_version():
    assert parse_version("2.10.0a0+git") == (2, 10)
    assert parse_version("garbage") == (2, 13)


def test_every_c10d_collective_of_this_torch_is_modeled():
    import torch.distributed  # noqa: F401  (registers the c10d ops)

    names = {s.name for s in torch._C._jit_get_all_schemas() if s.name.startswith(("c10d::", "_c10d_functional::"))}
    host_only = {"c10d::monitored_barrier_", "c10d::check_for_nan", "_c10d_functional::wait_tensor",
                 "_c10d_functional::_wrap_tensor_autograd"}  # not collectives (the wrap is a view)
    assert names - host_only <= set(SPECS), sorted(names - host_only - set(SPECS))


def test_specs_name_real_arguments():
    import torch.distributed  # noqa: F401

    schemas = {s.name: s for s in torch._C._jit_get_all_schemas()}
    for name, spec in SPECS.items():
        if name not in schemas:
            continue
        args = {a.name for a in schemas[name].arguments}
        for arg in spec.reads + spec.writes:
            assert arg == OUT or arg in args, (name, arg)


def test_collective_accesses_have_the_shape_the_kernel_record_takes():
    """A collective's accesses are the dispatch mode's six-tuples (with the strided view
    since trace format 1.1): the recorder unpacks them as such for every kernel."""
    from npusan.recorder.access import span
    from npusan.recorder.collectives import _span

    x = torch.zeros(4, 6)
    assert _span(x, True) == span(x)[:4] + (True, None)
    col = x[:, 1]  # strided: its exact shape travels beside the hull
    s = _span(col, False)
    base, off, ext, total, write, view = s
    assert (off, ext, total, write) == (4, 3 * 6 * 4 + 4, 96, False) and view is not None
    assert view == span(col)[4]
