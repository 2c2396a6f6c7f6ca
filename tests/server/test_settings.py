"""Settings are checked before the server starts: a bad GRADSTEP_* value stops it with the
variable's name and what it takes, instead of a server that fails every run. Caps that change
what a run says are part of the cache key."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest
from gradstep.cache import cache_key
from gradstep.runspec import RunSpec
from gradstep.settings import Settings, SettingsError


@pytest.mark.parametrize(
    ("variable", "raw", "says"),
    [
        ("GRADSTEP_WORKERS", "-1", "from 1 to 256"),
        ("GRADSTEP_WORKERS", "two", "not a whole number"),
        ("GRADSTEP_MEMORY_MB", "1.5", "not a whole number"),
        ("GRADSTEP_RATE", "fast", "not a number"),
        ("GRADSTEP_WALL_SECONDS", "nan", "out of range"),
        ("GRADSTEP_WALL_SECONDS", "0", "from 0.1 to 3600"),
        ("GRADSTEP_UID_BASE", "0", "out of range"),  # uid 0 is root: never a sandbox's
        ("GRADSTEP_TRUST_PROXY", "maybe", "1/true/yes/on or 0/false/no/off"),
    ],
)
def test_a_bad_value_names_its_variable_and_what_it_takes(monkeypatch, variable, raw, says):
    monkeypatch.setenv(variable, raw)
    with pytest.raises(SettingsError) as e:
        Settings.from_env()
    assert str(e.value).startswith(f"{variable}={raw}:") and says in str(e.value)


def test_every_default_is_in_its_own_range():
    defaults = Settings()
    for f in fields(Settings):
        if "range" in f.metadata:
            low, high = f.metadata["range"]
            assert low <= getattr(defaults, f.name) <= high, f.name


def test_good_values_are_read_with_their_kinds(monkeypatch):
    monkeypatch.setenv("GRADSTEP_WORKERS", " 3 ")
    monkeypatch.setenv("GRADSTEP_RATE", "0")  # 0 turns the limit off: in range
    monkeypatch.setenv("GRADSTEP_TRUST_PROXY", "off")
    s = Settings.from_env()
    assert (s.workers, s.rate, s.trust_proxy) == (3, 0.0, False)


def test_the_server_refuses_to_start_with_a_bad_setting():
    env = {"PATH": "/usr/bin:/bin", "GRADSTEP_CPU_SECONDS": "-5"}
    r = subprocess.run(
        [sys.executable, "-m", "gradstep", "serve", "--port", "0"], env=env, capture_output=True, timeout=60
    )
    assert r.returncode == 2
    assert "GRADSTEP_CPU_SECONDS=-5: out of range, a whole number from 1 to 3600" in r.stderr.decode()


def test_caps_that_change_a_runs_result_change_its_cache_key():
    code, options = "x = 1\n", {"max_steps": 500}
    base = Settings().result_caps()
    keys = {cache_key(code, options, base)}
    for cap in RunSpec.cap_names():
        keys.add(cache_key(code, options, Settings(**{cap: base[cap] * 2}).result_caps()))
    assert len(keys) == 1 + len(RunSpec.cap_names())
