"""Redaction rules: secrets in names, values and URLs become [REDACTED]; GPU variables stay."""
from __future__ import annotations

import getpass
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmcheck.host.fingerprint import env_vars
from rocmcheck.redact import REDACTED, Redactor, gpu_env_name
from rocmcheck.safetext import TEXT_LIMIT_CHARS, clean

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
    assert "3 environment variables outside the GPU allow-list left out" in redactor.summary()
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


# --- the rules of issue 21: every token shape, every form of a secret key, PEM blocks ---------

TABLE = {  # kind -> a token of that shape, as the token table must catch it anywhere
    "GitHub token": "ghp_" + "a1B2" * 6, "GitLab token": "glpat-" + "x9Y8" * 5,
    "Hugging Face token": "hf_" + "Ab3" * 6, "Slack token": "xoxp-1234-5678-abcdefXYZ",
    "AWS access key id": "ASIA" + "Q7W8E9R0T1Y2U3I4", "Google API key": "AIza" + "b" * 35,
    "Google OAuth token": "ya29." + "c0" * 12, "Azure client secret": "abc8Q~" + "d" * 33,
    "OpenAI-style key": "sk-ant-api03-" + "e5" * 12, "Stripe key": "sk_live_" + "f6" * 10,
    "npm token": "npm_" + "g7" * 18, "PyPI token": "pypi-AgE" + "h8" * 16,
    "Docker Hub token": "dckr_pat_" + "i9" * 12,
    "JSON web token": "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.c2ln",
}
MORE_SHAPES = {  # issue 31 item 4: short test tokens, Slack's rotating tokens, GitLab's routable ones
    "Slack token": ("xoxb-FAKE-1234", "xoxe.xoxp-1-Mi0yLTE3NzY0", "xoxe-1-My0xLTI2OTcy"),
    "GitLab token": ("glpat-FAKE123456", "glpat-Ab3dEf6hIj9kLm2nOp5q.01.0w1x2y3z4"),
}


@pytest.mark.parametrize("kind", list(TABLE))
def test_every_token_shape_of_the_table(kind):
    redactor = Redactor()
    assert redactor.text(f"value: ({TABLE[kind]}) end") == f"value: ({REDACTED}) end"
    assert redactor.counts() == {kind: 1}


@pytest.mark.parametrize("kind,token", [(kind, token) for kind, tokens in MORE_SHAPES.items() for token in tokens])
def test_short_rotating_and_routable_tokens(kind, token):
    redactor = Redactor()
    assert redactor.text(f"value: ({token}) end") == f"value: ({REDACTED}) end"
    assert redactor.counts() == {kind: 1}


@pytest.mark.parametrize("token", [*TABLE.values(), *(t for tokens in MORE_SHAPES.values() for t in tokens)])
def test_a_token_after_an_escaped_line_break_or_tab(token):
    """Issue 31 item 4: `\\n` and `\\t` as two characters (a string literal in a probe's source, a
    JSON log line) end a word: the token after them goes."""
    text = f'NOTE = "sent\\n{token}\\tand\\t{token}\\r\\n"'
    out = Redactor().text(text)
    assert token not in out and out == f'NOTE = "sent\\n{REDACTED}\\tand\\t{REDACTED}\\r\\n"', out


@pytest.mark.parametrize("text,secret", [
    ("connect Password=Hunter-22 now", "Hunter-22"), ("db_password: s3cr3t-pw", "s3cr3t-pw"),
    ('{"api_key": "with spaces 42"}', "with spaces 42"), ("{'client_secret': 'cs-991'}", "cs-991"),
    ("X-Api-Key: hdr-55aa", "hdr-55aa"), ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,password:pw-in-conf",
                                          "pw-in-conf"),
    ("redis://:pw-no-user@cache:6379", "pw-no-user"), ("https://x-oauth-basic-token-1234567@host/r", "x-oauth-basic"),
    ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("curl -H 'Authorization: Bearer abc.def.ghi'", "abc.def.ghi"),
    ("Cookie: session=s-1; theme=dark", "s-1"), ("token abc then bearer 0123456789abcdef", "0123456789abcdef"),
    ("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX", "XXXXXXXXXXXXXXXXXXXXXXXX"),
    # issue 31 item 4: a secret pair first in an option string, a password that is a word
    ("PYTORCH_CUDA_ALLOC_CONF=password:pw-first,expandable_segments:True", "pw-first"),
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,password:supersecret", "supersecret"),
    ("--alloc-conf=mode:fast,token=tk-in-option", "tk-in-option"), ('{"password": "secret"}', '"secret"'),
    ("token=abc:def==", "def=="),
])
def test_context_forms_in_any_case(text, secret):
    out = Redactor().text(text)
    assert secret not in out and REDACTED in out, out


@pytest.mark.parametrize("text", [
    "max_split_size_mb:128,expandable_segments:True", "key_padding_mask=None",
    "attn(q, k, v, key_padding_mask=m)",
    "torch 2.13.0+git1a2b3c4d5e6f7a8b", "sha256:0123456789abcdef0123456789abcdef", "eos_token=</s> pad_token: <pad>",
    "max_new_tokens=20 num_tokens: 7", "tokenizer=AutoTokenizer", "    token = new_token()",
    "def f(token: str) -> None:",
    "env={TOKEN_ENV: token}", '{"TOKEN_ENV": "ROCMCHECK_CHILD_TOKEN"}', "KeyError: 'weight'", "http://localhost:8080/x",
    "git@github.com:ROCm/ROCm.git", "hf_hub_download(repo_id)", "the bearer of bad news",
    "ROCm 6.4 gfx942:sramecc+:xnack-",
    "not an nvidia-smi XML document: unclosed token: line 5, column 11",  # expat's place, not a token
    "password = args.db_password", "Redacted 3 value(s): 2 Slack token, 1 GitLab token.",
    # a path's last part before a tool's message is no key: `rocmcheck report --from /etc/passwd` said
    # "/etc/passwd: [REDACTED] valid JSON"
    "/etc/passwd: not valid JSON (Expecting value: line 1 column 1 (char 0))",
    "cat: /run/secrets/db_password: Permission denied", "open /var/run/secrets/kubernetes.io/serviceaccount/token: "
    "no such file or directory",
])
def test_near_misses_stay(text):
    redactor = Redactor()
    assert redactor.text(text) == text
    assert redactor.counts() == {}


def test_values_of_secret_named_variables_go_wherever_they_appear():
    environ = {"MY_SERVICE_PASSWORD": "svc-pass-1", "WANDB_API_KEY": "0f1e2d3c4b5a", "PWD": "/work/project",
               "XDG_SESSION_TYPE": "wayland", "HF_HUB_DISABLE_TOKEN": "1", "HIP_VISIBLE_DEVICES": "0,1"}
    redactor = Redactor(environ=environ)
    out = redactor.text("printed svc-pass-1 and 0f1e2d3c4b5a bare, in /work/project on wayland with 1 GPU")
    assert out == f"printed {REDACTED} and {REDACTED} bare, in /work/project on wayland with 1 GPU"
    assert redactor.counts() == {"secret-named variable": 2}


PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\n{}\n-----END OPENSSH PRIVATE KEY-----"
KEY_LINES = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAE\nbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"


@pytest.mark.parametrize("text,kept", [
    (f"before\n{PEM.format(KEY_LINES)}\nafter", ("before\n-----BEGIN", "-----END OPENSSH PRIVATE KEY-----\nafter")),
    (f"[... 9 bytes cut by rocmcheck ...]\n{KEY_LINES}\n-----END RSA PRIVATE KEY-----", ("cut by rocmcheck ...]\n",)),
    (f"-----BEGIN EC PRIVATE KEY-----\n{KEY_LINES}\nTraceback (most recent call last):", ("Traceback (most",)),
])
def test_private_key_blocks_whole_or_cut(text, kept):
    out = Redactor().text(text)
    assert "b3BlbnNzaC1" not in out and "bm9uZQAAAAAA" not in out and REDACTED in out
    for part in kept:
        assert part in out


SEPARATORS = " \n\t,;:=()[]{}'\"|/"


@given(st.sampled_from(sorted(TABLE.values())), st.text(alphabet=SEPARATORS + "@", min_size=1, max_size=4),
       st.text(alphabet=SEPARATORS, min_size=1, max_size=4), st.text(max_size=40))
def test_a_token_never_survives_its_surroundings(token, before, after, noise):
    out = Redactor().text(noise + before + token + after + noise)
    assert token not in out


@given(st.text(max_size=300))
def test_redacting_twice_changes_nothing_more(text):
    once = Redactor().text(text)
    assert Redactor().text(once) == once


def test_linear_time_on_adversarial_megabytes():
    """Each shape that made a rule backtrack (a URL rule took 1 s on 16 kB): 2 MB in all, done in
    seconds; a quadratic rule would take hours on this input."""
    pieces = ["a://" + "a:" * 40_000, "@" * 80_000, "KEY" * 30_000, "--" + "key" * 30_000, "a='" * 30_000,
              "a." * 40_000, "-----BEGIN PRIVATE KEY-----" * 4_000, "-----END PRIVATE KEY-----" * 4_000,
              "A" * 20 + "\n" * 30_000, "eyJ" * 30_000, "a+" * 40_000 + "://", "Authorization: " * 6_000]
    text = "".join(pieces * 3)
    assert len(text) > 2_000_000
    started = time.perf_counter()
    Redactor().text(text)
    assert time.perf_counter() - started < 60


def test_clean_redacts_then_keeps_head_and_tail_of_a_huge_message():
    """A probe's 2 MB message: every secret goes (before the cut, so no half of one survives
    it), then the first and last 8 kB stay, the cut marked."""
    secret = "glpat-" + "z7" * 12
    text = "start " + ("x" * 99 + "\n") * 20_000 + f" token {secret} end"
    out = clean(text)
    assert len(out) == TEXT_LIMIT_CHARS and secret not in out and out.startswith("start xxx")
    assert out.endswith(f"token {REDACTED} end") and f"characters, cut to {TEXT_LIMIT_CHARS} by rocmcheck ...]" in out
    assert clean(out) == out  # a cleaned text is clean: the journal and the report may clean again


@pytest.mark.parametrize("text, secret", [
    ("token: line5column11", "line5column11"), ("token: lines 5, column 11", "lines"),
    ("password: line 5 column 11", "line"), ("token: line 5, columns", "line"),
])
def test_only_a_parsers_exact_place_is_spared_after_a_secret_key(text, secret):
    redactor = Redactor()
    assert secret not in redactor.text(text).split(": ", 1)[1] and redactor.counts() == {"secret-named value": 1}
