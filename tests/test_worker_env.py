"""A pack's worker gets an allow-listed environment (not the host's secrets) and a private
temporary directory that is gone once the worker has stopped or been replaced."""

from __future__ import annotations

import functools
import os
import stat
import sys
import tempfile
import time

import pytest
from conftest import HELPERS

from comfy_airlock import heap_policy
from comfy_airlock.host import pack as pack_module
from comfy_airlock.host.pack import IsolatedPack
from comfy_airlock.supervisor import Worker
from comfy_airlock.worker_env import worker_env

SECRETS = {
    "OPENAI_API_KEY": "sk-test-openai",
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_ACCESS_KEY_ID": "AKIATEST",
    "HF_TOKEN": "hf_test",
    "GITHUB_TOKEN": "ghp_test",
    "MY_TOKEN": "random-token",
    "DATABASE_URL": "postgres://user:pw@db/x",
    "CUDA_SECRET_TOKEN": "looks-like-cuda-but-is-a-secret",
}
NEEDED = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "CUDA_VISIBLE_DEVICES": "1,0",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "OMP_NUM_THREADS": "2",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "HF_HOME": "/data/hf",
    "HTTPS_PROXY": "http://proxy:3128",
    "AIRLOCK_TEST_KNOB": "1",
}


def test_the_allow_list_keeps_secrets_and_passes_what_workers_need():
    host = {"PATH": "/usr/bin", "HOME": "/home/u", **SECRETS, **NEEDED, "LD_PRELOAD": "/x.so"}
    env = worker_env({"KMP_DUPLICATE_LIB_OK": "TRUE", "LANG": "de_DE.UTF-8"}, {}, host)
    for name in SECRETS:
        assert name not in env, name
    assert "LD_PRELOAD" not in env
    for name, value in NEEDED.items():
        if name != "LANG":
            assert env[name] == value, name
    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/home/u"
    # The pack's [env_vars] win over the host's, and ours over both.
    assert env["KMP_DUPLICATE_LIB_OK"] == "TRUE" and env["LANG"] == "de_DE.UTF-8"
    ours = worker_env({"AIRLOCK_WORKER": "0"}, {"AIRLOCK_WORKER": "1"}, host)
    assert ours["AIRLOCK_WORKER"] == "1"


def test_the_operator_can_pass_more():
    host = {**SECRETS, "AIRLOCK_WORKER_ENV": "MY_TOKEN, COMPANY_*", "COMPANY_REGION": "eu"}
    host["COMPANY_API_KEY"] = "k"
    env = worker_env({}, {}, host)
    assert env["MY_TOKEN"] == "random-token"  # named exactly: the operator's call
    assert env["COMPANY_REGION"] == "eu"
    assert "COMPANY_API_KEY" not in env  # a prefix never passes a secret-looking name
    assert "OPENAI_API_KEY" not in env


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """A real IsolatedPack on this interpreter, its worker spawned by ``_spawn`` as in ComfyUI
    (the helpers are added to its path so the test can call them)."""
    monkeypatch.setattr(pack_module, "Worker", functools.partial(Worker, sys_path=[HELPERS]))
    made = []

    def make(name: str = "envpack", **kw) -> IsolatedPack:
        d = tmp_path / name
        d.mkdir(exist_ok=True)
        p = IsolatedPack(
            name=name, dir=str(d), python=sys.executable, env_dir=sys.prefix, env_key="test", **kw
        )
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def test_host_secrets_do_not_reach_the_worker_but_env_vars_do(isolated, monkeypatch):
    for k, v in {**SECRETS, **NEEDED}.items():
        monkeypatch.setenv(k, v)
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY"):
        monkeypatch.delenv(k, raising=False)
    p = isolated(env_vars={"PACK_SETTING": "on", "OMP_NUM_THREADS": "1"})
    env = p.worker().call("airlock_escape:environ")
    leaked = sorted(k for k in SECRETS if k in env)
    assert leaked == []
    assert not [k for k, v in env.items() if v in SECRETS.values()]
    assert env["PACK_SETTING"] == "on" and env["OMP_NUM_THREADS"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,0" and env["AIRLOCK_TEST_KNOB"] == "1"
    assert env["AIRLOCK_WORKER"] == "1" and "AIRLOCK_COMFY" in env
    assert env["PATH"] == os.environ["PATH"]
    # Threads sleep when idle by default (thread_policy.py); the host's own setting is not
    # touched.
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in os.environ
    # The heap keeps what nodes free while busy (heap_policy.py).
    assert env["MALLOC_TRIM_THRESHOLD_"] == str(heap_policy.TRIM_BYTES)
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(heap_policy.MMAP_BYTES)


def test_a_pack_or_operator_wait_policy_wins(isolated, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", "5000")
    env = isolated("spins").worker().call("airlock_escape:environ")
    assert env["GOMP_SPINCOUNT"] == "5000" and "OMP_WAIT_POLICY" not in env
    monkeypatch.delenv("GOMP_SPINCOUNT")
    env = (
        isolated("active", env_vars={"OMP_WAIT_POLICY": "ACTIVE"})
        .worker()
        .call("airlock_escape:environ")
    )
    assert env["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_pack_or_operator_heap_setting_wins(isolated):
    tunables = "glibc.malloc.trim_threshold=1048576"
    env = (
        isolated("tuned", env_vars={"GLIBC_TUNABLES": tunables})
        .worker()
        .call("airlock_escape:environ")
    )
    assert env["GLIBC_TUNABLES"] == tunables
    assert "MALLOC_TRIM_THRESHOLD_" not in env and "MALLOC_MMAP_THRESHOLD_" not in env


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ({}, False),
        ({"MALLOC_ARENA_MAX": "2"}, False),  # not a knob that fixes the threshold
        ({"MALLOC_TOP_PAD_": "0"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, False),
    ],
)
def test_heap_policy_rule(given, kept):
    env = dict(given)
    heap_policy.apply(env)
    if kept:
        assert env == given
    else:
        assert env["MALLOC_TRIM_THRESHOLD_"] == str(heap_policy.TRIM_BYTES)
        assert {k: env[k] for k in given} == given
    elsewhere = dict(given)
    heap_policy.apply(elsewhere, platform="win32")
    assert elsewhere == given


def _private(path: str) -> None:
    st = os.stat(path)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.getuid()
    assert os.path.basename(path).startswith(f"airlock-tmp-{os.getpid()}-")


def _wait_dead(w: Worker) -> None:
    for _ in range(500):  # the reaper publishes the exit within milliseconds; 10 s at most
        if not w.alive:
            return
        time.sleep(0.02)
    raise AssertionError("the worker did not die")


def test_each_worker_has_a_private_tmpdir_removed_when_it_stops(isolated):
    p = isolated()
    w = p.worker()
    env = w.call("airlock_escape:environ")
    tmp = w.call("airlock_escape:leave_temp_files", 3)
    assert env["TMPDIR"] == tmp == env["XDG_RUNTIME_DIR"]
    _private(tmp)
    assert tmp != tempfile.gettempdir()
    assert len(os.listdir(tmp)) == 4
    other = isolated("other").worker().call("airlock_escape:tmpdir")
    assert other != tmp
    # Killed: the reaper removes it before anyone sees the worker dead.
    w.kill()
    _wait_dead(w)
    assert not os.path.exists(tmp)
    # Replaced: the next generation has a new one.
    tmp2 = w.call("airlock_escape:leave_temp_files", 1)
    assert tmp2 != tmp
    _private(tmp2)
    # Stopped in order: gone when close() returns.
    p.close()
    assert not os.path.exists(tmp2)


def test_plain_workers_get_one_too(make_worker):
    w = make_worker()
    tmp = w.call("airlock_escape:leave_temp_files", 2)
    _private(tmp)
    w.close()
    assert not os.path.exists(tmp)


def test_a_plain_worker_gets_the_allow_list_unless_it_opts_out(monkeypatch):
    import comfy_airlock

    for k, v in {**SECRETS, **NEEDED}.items():
        monkeypatch.setenv(k, v)
    w = Worker(sys.executable, sys_path=[HELPERS], name="plain-env")
    try:
        env = w.call("airlock_escape:environ")
    finally:
        w.close()
    assert sorted(k for k in SECRETS if k in env) == []
    assert env["CUDA_VISIBLE_DEVICES"] == "1,0" and env["PATH"] == os.environ["PATH"]
    w = Worker(sys.executable, sys_path=[HELPERS], name="inherit", env=comfy_airlock.INHERIT_ENV)
    try:
        env = w.call("airlock_escape:environ")
    finally:
        w.close()
    assert {k: env[k] for k in SECRETS} == SECRETS
    with pytest.raises(TypeError, match="INHERIT_ENV"):
        Worker(sys.executable, env="inherit")
