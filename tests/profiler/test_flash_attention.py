"""Flash attention as the profile measures it (profiler/engine_floor.py): off only where a plain token is
at least 10% cheaper without it, recorded in the profile, run by the session, kept out of the floor
(llama.cpp's own settings), and carried to llama-server (the bench peer, the export)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from specplan.core.errors import ProfileError
from specplan.core.profile import LatencyCurve, load_profile, save_profile
from specplan.profiler import engine_floor
from tests.planner.test_floor import lookup_profile


class Timed:
    """A stand-in session: remembers whether flash attention was off."""

    def __init__(self, target):
        self.flash_off = target.flash_off

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None


def stub_timing(monkeypatch, with_flash: float, without: float) -> list[bool]:
    """measure_latency returns ``with_flash`` / ``without`` ms by the session's setting; returns the settings timed."""
    timed: list[bool] = []

    def measure(session, device, context, widths, repeats):
        timed.append(session.flash_off)
        return LatencyCurve(context=1, n=(1,), ms=(without if session.flash_off else with_flash,))

    monkeypatch.setattr("specplan.runtime.build.target_session", lambda target, device: Timed(target))
    monkeypatch.setattr(engine_floor, "measure_latency", measure)
    return timed


def llama_target(**changes):
    return SimpleNamespace(**{"backend": "llama.cpp", "exact": False, "flash_off": False, "wide_from": 0, **changes})


@pytest.mark.parametrize("with_flash, without, off", [(29.7, 15.8, True), (85.0, 78.0, False), (10.0, 9.0, True)])
def test_flash_attention_goes_off_only_where_a_plain_token_is_10_percent_cheaper(monkeypatch, with_flash, without, off):
    stub_timing(monkeypatch, with_flash, without)
    monkeypatch.setattr(engine_floor, "replace", lambda target, **changes: SimpleNamespace(**{**vars(target), **changes}))
    assert engine_floor.flash_attention_off(llama_target(), [1, 2, 3], 3) == (off, with_flash, without)


def test_exact_numerics_keep_flash_attention():
    assert engine_floor.flash_attention_off(llama_target(exact=True), [1], 3)[0] is False


def test_the_floor_is_timed_at_llama_cpps_own_setting_when_the_profile_turned_it_off(monkeypatch):
    timed = stub_timing(monkeypatch, 29.7, 15.8)
    monkeypatch.setattr(engine_floor, "replace", lambda target, **changes: SimpleNamespace(**{**vars(target), **changes}))
    curve = LatencyCurve(context=1, n=(1, 2), ms=(15.8, 20.0))
    assert engine_floor.engine_plain_ms(llama_target(flash_off=True), curve, [1], 3) == 29.7 and timed == [False]
    assert engine_floor.engine_plain_ms(llama_target(), curve, [1], 3) == 15.8  # the curve is llama.cpp's own


def test_the_setting_survives_the_profile_round_trip(tmp_path):
    profile = lookup_profile(engine_plain_ms=29.7, numerics="fast")
    changed = replace(profile, models=(replace(profile.target, flash_attention="off"),))
    save_profile(changed, tmp_path / "profile.yaml")
    assert load_profile(tmp_path / "profile.yaml").target.flash_attention == "off"
    save_profile(profile, tmp_path / "default.yaml")
    assert "flash_attention" not in (tmp_path / "default.yaml").read_text()
    (tmp_path / "bad.yaml").write_text((tmp_path / "profile.yaml").read_text().replace("flash_attention: 'off'",
                                                                                         "flash_attention: on")
                                       .replace("flash_attention: off", "flash_attention: sometimes"))
    with pytest.raises(ProfileError, match="flash_attention"):
        load_profile(tmp_path / "bad.yaml")


def test_the_context_runs_without_flash_attention_only_under_fast_numerics():
    llama_cpp = pytest.importorskip("llama_cpp")
    from specplan.runtime.llama_cpp_session import context_params

    assert context_params(llama_cpp, 512, 2, 2, False, True).flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    assert context_params(llama_cpp, 512, 2, 2, False).flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
    assert context_params(llama_cpp, 512, 2, 2, True, True).flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED


def test_llama_server_peers_and_exports_carry_it():
    from specplan.bench.llama_server_peer import parse_peer, server_command
    from specplan.planner.export.plan import export_plan

    peer = parse_peer("llama-server-no-fa")
    assert peer.flash_off and peer.spec_type is None and peer.describe() == "plain decoding, flash attention off"
    command = server_command("llama-server", peer, "m.gguf", 2, 8080)
    assert command[command.index("-fa") + 1] == "off" and "-fa" not in server_command("llama-server", parse_peer(
        "llama-server"), "m.gguf", 2, 8080)
    profile = lookup_profile(engine_plain_ms=29.7, numerics="fast")
    off = replace(profile, models=(replace(profile.target, flash_attention="off"),))
    assert export_plan(off, "llama.cpp").config.endswith(" -fa off")
    assert "-fa" not in export_plan(profile, "llama.cpp").config


@pytest.mark.parametrize("setting, measured_off, expected", [("llama.cpp", True, False), ("off", False, True),
                                                            ("measure", True, True), ("measure", False, False)])
def test_the_profile_follows_its_flash_attention_setting(monkeypatch, setting, measured_off, expected):
    from specplan.models.load import LoadedModel
    from specplan.profiler import run
    from specplan.profiler.run import ProfileSettings

    monkeypatch.setattr(run, "flash_attention_off", lambda target, context, repeats: (measured_off, 21.5, 15.5))
    target = LoadedModel("default", "m.gguf", None, None, "fp", "gguf", "llama.cpp", exact=False)
    chosen = run._with_flash_attention_choice(target, [1], ProfileSettings(flash_attention=setting))
    assert chosen.flash_off is expected
    assert run._with_flash_attention_choice(replace(target, exact=True), [1], ProfileSettings(flash_attention="off")).flash_off is False
