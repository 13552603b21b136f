"""Redaction rules: secrets in names, values and URLs become [REDACTED]; GPU variables stay."""
from __future__ import annotations

import getpass
import socket
from pathlib import Path

import pytest

from rocmcheck.fingerprint import env_vars
from rocmcheck.redact import REDACTED, Redactor, gpu_env_name

GHP = "ghp_" + "A1b2C3d4" * 4 + "Zz9Y"
FINE_PAT = "github_pat_" + "11ABCDEFG0" * 3 + "_" + "x" * 40
HF = "hf_" + "QwErTyUiOp" * 3 + "AsDf"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
OPENAI = "sk-proj-" + "Ab3" * 12


@pytest.mark.parametrize("text,secret,kind", [
    (f"token {GHP} used", GHP, "GitHub token"),
    (f"export GH={FINE_PAT}", FINE_PAT, "GitHub token"),
    (f"login with {HF}", HF, "Hugging Face token"),
    (f"aws {AWS} key", AWS, "AWS access key id"),
    (f"client = OpenAI(api_key='{OPENAI}')", OPENAI, "OpenAI-style key"),
    ("db postgres://u:p4ss@db.internal:5432/x", "u:p4ss", "credentials in a URL"),
    ("clone https://me:s3cr@t@github.com/o/r", "s3cr@t", "credentials in a URL"),
    ("WANDB_API_KEY=0f1e2d3c4b5a69788796a5b4c3d2e1f0 python train.py", "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
     "secret-named value"),
    ("environ({'HF_TOKEN': 'plain words secret'})", "plain words secret", "secret-named value"),
    ("train.py --hf-token abc123xyz --epochs 3", "abc123xyz", "secret option"),
    ("cli --password=hunter2", "hunter2", "secret option"),
    ("GET https://example.com/f?x=1&access_token=qwerty123", "qwerty123", "secret URL parameter"),
])
def test_value_patterns_redact_and_count_by_kind(text, secret, kind):
    redactor = Redactor()
    out = redactor.text(text)
    assert secret not in out and REDACTED in out
    assert redactor.counts() == {kind: 1}
    assert secret not in redactor.summary() and kind in redactor.summary()
    assert redactor.text(out) == out  # idempotent: [REDACTED] is not redacted again


@pytest.mark.parametrize("text", [
    "KeyError: 'weight'", "multi-session mode", "c10::cuda::CUDAError at::native", "torch 2.13.0+rocm7.2 gfx1100",
    "HSA_OVERRIDE_GFX_VERSION=11.0.0", "sk-learn", "https://github.com/ROCm/ROCm/issues/3874", "--device cuda:0",
])
def test_ordinary_text_is_left_alone(text):
    redactor = Redactor(anonymize=True)
    assert redactor.text(text) == text
    assert redactor.counts() == {}


def test_environment_allow_list_and_deny_list_inside_it():
    environ = {"HIP_VISIBLE_DEVICES": "0,1", "HSA_OVERRIDE_GFX_VERSION": "11.0.0", "HF_TOKEN": HF,
               "WANDB_API_KEY": "abc", "HSA_AUTH_SESSION": "deadbeef",
               "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True",
               "HOME": "/home/alice"}
    assert env_vars(environ) == {"HIP_VISIBLE_DEVICES": "0,1", "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
                                 "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"}
    redactor = Redactor()
    kept = redactor.data({"run": {"env": environ}})["run"]["env"]
    assert kept == {"HIP_VISIBLE_DEVICES": "0,1", "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
                    "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True", "HSA_AUTH_SESSION": REDACTED}
    assert redactor.counts() == {"secret-named variable": 1}
    assert "3 environment variable(s) outside the GPU allow-list left out" in redactor.summary()
    assert not gpu_env_name("CUDA_API_KEY") and gpu_env_name("CUDA_VISIBLE_DEVICES")


def test_nested_data_keys_and_lists_are_redacted():
    data = {"evidence": {"output_tail": f"push {GHP}", "argv": ["--x", f"s3://{AWS}:pw@bucket"]}, GHP: [1, 2.5, None]}
    redactor = Redactor()
    text = repr(redactor.data(data))
    assert GHP not in text and AWS not in text and "pw@" not in text
    assert redactor.counts()["GitHub token"] == 1  # one distinct value, however often it appears


def test_anonymize_replaces_home_user_host_and_public_ips():
    home, user, host = str(Path.home()), getpass.getuser(), socket.gethostname()
    text = (f"{home}/train.py /home/bob/x /Users/carol/y C:\\Users\\dave\\z user {user} on {host} "
            f"master 10.1.2.3:29500 peer fe80::1ff:fe23:4567:890a local 127.0.0.1 version 2.13.0.1234")
    redactor = Redactor(anonymize=True)
    out = redactor.text(text)
    for gone in ("/home/bob", "/Users/carol", "dave", "10.1.2.3", "fe80::1ff", home + "/"):
        assert gone not in out
    if len(user) >= 3:
        assert f"user {user} " not in out
    if len(host) >= 3 and host != "localhost":
        assert f"on {host} " not in out
    assert "127.0.0.1" in out and "2.13.0.1234" in out
    assert {"home directory", "IP address"} <= set(redactor.counts())
    assert "Anonymized: home directory" in redactor.summary()
    assert Redactor().text(text) == text  # without --anonymize identities stay


def test_argv_lists_redact_the_value_after_a_secret_option():
    redactor = Redactor()
    argv = redactor.data(["report", "--token", "tok-123", "--device", "cpu", "--api-key=k-456", "-k", "gemm"])
    assert argv == ["report", "--token", REDACTED, "--device", "cpu", f"--api-key={REDACTED}", "-k", "gemm"]
    assert redactor.counts() == {"secret option": 2}
    assert redactor.text("`HIP_API_KEY=[REDACTED]`") == "`HIP_API_KEY=[REDACTED]`"  # Markdown code spans survive
