"""No planted secret leaves the machine: one real `run`, `report --from` and `gate --json -`
with secrets in the environment and in a probe's message, output, stack and measurements;
none may reach any file written (JSON, Markdown, journal, node verdict, attachment,
reproducers) nor stdout/stderr, while GPU variables and ordinary evidence stay.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rocmcheck.cli import main
from rocmcheck.redact import REDACTED

PEM_BODY = "MIIEowIBAAKCAQEAplantedPemBodyLine1xyz\nQWxhZGRpbjpvcGVuIHNlc2FtZXBsYW50ZWQ2"
# kind -> (needle that must never appear, the text the probe prints it in). The first twelve are
# the kinds issue 21 planted; the rest come from the token table.
PLANTS = {
    "short Hugging Face token": ("hf_Sh0rtTok3nAbCdEf12", "login hf_Sh0rtTok3nAbCdEf12 ok"),
    "password in PYTORCH_CUDA_ALLOC_CONF": ("allocPw-7781", None),  # in the environment only
    "URL password without user": ("redisPw-5521", "cache at redis://:redisPw-5521@cache:6379/0"),
    "bare MY_SERVICE_PASSWORD value": ("svc-Pass-90210", None),  # printed bare, below
    "bare WANDB_API_KEY value": ("0f1e2d3c4b5a69788796a5b4c3d2e1f0aa55", None),
    "lowercase password=": ("lowerPw-8812", "connect password=lowerPw-8812 retry"),
    "JSON api_key": ("jsonKey-3341-zz", 'config {"api_key": "jsonKey-3341-zz", "lr": 0.1}'),
    "Authorization: Bearer": ("bearerTok9876543210", "-H 'Authorization: Bearer bearerTok9876543210'"),
    "JWT": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlcGxhbnRlZA",
            "jwt=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlcGxhbnRlZA"),
    "Slack xoxb-": ("xoxb-1234567890-0987654321-plantedSlack", "slack xoxb-1234567890-0987654321-plantedSlack"),
    "GitLab glpat-": ("glpat-plantedGitLab1234567", "remote glpat-plantedGitLab1234567"),
    "PEM private key": ("plantedPemBody",
                        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"),
    "GitHub token": ("ghp_plantedGitHub0123456789abcdefghij", "push ghp_plantedGitHub0123456789abcdefghij"),
    "AWS access key id": ("AKIAPLANTED000AWS123", "aws AKIAPLANTED000AWS123"),
    "Google API key": ("AIzaSyPlanted-Google_Key0123456789abcde", "maps AIzaSyPlanted-Google_Key0123456789abcde"),
    "Anthropic key": ("sk-ant-api03-plantedAnthropicKey0123456789",
                      "claude sk-ant-api03-plantedAnthropicKey0123456789"),
    "npm token": ("npm_plantedNpmToken0123456789abcdefghij",
                  "//registry/:_authToken=npm_plantedNpmToken0123456789abcdefghij"),
    "PyPI token": ("pypi-AgEplantedPyPiToken0123456789abcdef", "upload pypi-AgEplantedPyPiToken0123456789abcdef"),
    "URL password with user": ("urlPw-4411", "clone https://me:urlPw-4411@git.example/x"),
    "URL token parameter": ("qparam-7788", "GET /f?x=1&access_token=qparam-7788"),
    "X-Api-Key header": ("hdrKey-6655", "X-Api-Key: hdrKey-6655"),
    "argv --hf-token": ("argvTok-3322", None),  # on the command line only
}
ENV = {"MY_SERVICE_PASSWORD": "svc-Pass-90210", "WANDB_API_KEY": PLANTS["bare WANDB_API_KEY value"][0],
       "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,password:allocPw-7781",
       "PYTORCH_HIP_ALLOC_CONF": "expandable_segments:False",  # disagrees: config-lint[alloc-conf] quotes both
       "HIP_VISIBLE_DEVICES": "1", "HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
# Ordinary evidence that must survive every output.
KEPT = ("max_split_size_mb:128", "key_padding_mask=None", "2.13.0+git1a2b3c4d")

LEAKY_PROBE = '''
import json
import os
import sys

import rocmcheck


@rocmcheck.probe("leaky-secrets", title="leaks secrets", targets="redaction", timeout=60, gate=True)
def leaky(ctx):
    plants = json.loads(os.environ["ROCMCHECK_TEST_PLANTS"])  # a name that is not secret-looking
    lines = [*plants, "service " + os.environ["MY_SERVICE_PASSWORD"], os.environ["WANDB_API_KEY"],
             "max_split_size_mb:128 key_padding_mask=None torch 2.13.0+git1a2b3c4d"]
    text = "\\n".join(lines)
    print(text)
    print(text, file=sys.stderr)
    ctx.measure(note=text, last=lines[-2])
    one_line = " | ".join(line.replace("\\n", " ") for line in lines)
    try:
        raise RuntimeError(text)
    except RuntimeError as exc:
        raise AssertionError("upload failed: " + one_line) from exc
'''


def _leaks(texts):
    """{kind: [where]} for every planted secret found in `texts` ({where: text})."""
    found = {}
    for kind, (needle, _) in PLANTS.items():
        where = [name for name, text in texts.items() if needle in text]
        if where:
            found[kind] = where
    return found


@pytest.mark.children
def test_no_planted_secret_reaches_any_output(tmp_path, monkeypatch, capfd):
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "leaky.py").write_text(LEAKY_PROBE)
    monkeypatch.setenv("ROCMCHECK_TEST_PLANTS", json.dumps([t for _, t in PLANTS.values() if t]))
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    common = ["--device", "cpu", "--probes-path", str(probes), "--out-dir", str(out)]
    run = ["run", *common, "--probe", "leaky-secrets", "--probe", "config-lint", "-k", "leaky or alloc",
           "--json", str(tmp_path / "run.json")]
    monkeypatch.setattr(sys, "argv", ["rocmcheck", *run, "--hf-token", "argvTok-3322"])  # what the run records
    assert main(run) == 1
    assert main(["report", "--from", str(tmp_path / "run.json"), "-o", str(tmp_path / "bug.md"),
                 "--probes-path", str(probes)]) == 0
    gate = ["gate", *common, "--require", "leaky-secrets", "--json", "-"]
    monkeypatch.setattr(sys, "argv", ["rocmcheck", *gate])
    assert main(gate) == 1
    captured = capfd.readouterr()

    files = {str(p.relative_to(tmp_path)): p.read_text() for p in tmp_path.rglob("*")
             if p.is_file() and not p.is_relative_to(probes)}
    kinds = {Path(name).suffix for name in files}
    assert {".json", ".jsonl", ".md", ".py"} <= kinds and len(files) >= 9, sorted(files)  # 2 runs + attachment
    texts = {**files, "stdout": captured.out, "stderr": captured.err}
    leaked = _leaks(texts)
    print(f"secret kinds planted: {len(PLANTS)}, leaked: {len(leaked)}")
    assert not leaked, leaked

    node = json.loads(captured.out[captured.out.index("{"):])  # the node verdict on stdout
    assert node["status"] == "NO-GO" and "[REDACTED]" in node["failing"][0]["message"]
    report = json.loads((tmp_path / "run.json").read_text())
    alloc = next(v for v in report["verdicts"] if v["variant"] == "config-lint[alloc-conf]")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,password:[REDACTED]" in alloc["message"]
    env = report["fingerprint"]["host"]["env"]
    assert env["HIP_VISIBLE_DEVICES"] == "1" and env["HSA_OVERRIDE_GFX_VERSION"] == "11.0.0"
    leaky = next(v for v in report["verdicts"] if v["variant"] == "leaky-secrets")
    for kept in KEPT:  # over-redaction would destroy evidence
        assert kept in leaky["message"] and kept in leaky["evidence"]["output_tail"], kept
    script = next(text for name, text in files.items() if name.endswith(".py"))
    config = script.split("CONFIG = ", 1)[1].split("\n\n\n", 1)[0]
    assert "'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:True,password:[REDACTED]'" in config
    assert "MY_SERVICE_PASSWORD" not in config and "WANDB_API_KEY" not in config  # only the allow-list
    twin = json.loads(files["bug.json"])
    assert twin["bug_report"]["redacted_as_recorded"] > 0
    assert "more had been redacted as the run recorded them" in files["bug.md"]
    for text in (files["bug.md"], files["bug.json"]):
        assert "HIP_VISIBLE_DEVICES" in text and "HSA_OVERRIDE_GFX_VERSION" in text and "11.0.0" in text
    assert set(twin["fingerprint"]["host"]["env"]) >= {"HIP_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF"}
    assert "MY_SERVICE_PASSWORD" not in twin["fingerprint"]["host"]["env"]  # secret-looking: never collected


# --- issue 31, item 4: the attachment `report --from` writes, every text of it ------------------
# kind -> (needle that must never appear in any file, the text that carries it: a token as it is,
# a context-told secret with its context).
ATTACHED = {
    "Slack bot token": ("xoxb-1122334455-5544332211-plantedBotTok", "xoxb-1122334455-5544332211-plantedBotTok"),
    "Slack token, short": ("xoxb-FAKE-1234", "xoxb-FAKE-1234"),
    "Slack rotating token": ("xoxe.xoxp-1-Mi0yLTE3NzY0planted", "xoxe.xoxp-1-Mi0yLTE3NzY0planted"),
    "GitLab token": ("glpat-plantedGl4bT0ken12", "glpat-plantedGl4bT0ken12"),
    "GitLab token, short": ("glpat-FAKE123456", "glpat-FAKE123456"),
    "GitHub token": ("ghp_plantedAttachGitHub0123456789ab", "ghp_plantedAttachGitHub0123456789ab"),
    "GitHub fine-grained token": ("github_pat_11PLANTED0_attachFineGrained0123",
                                  "github_pat_11PLANTED0_attachFineGrained0123"),
    "Hugging Face token": ("hf_plantedAttachHuggingFace01", "hf_plantedAttachHuggingFace01"),
    "AWS access key id": ("AKIAPLANTEDATTACH123", "AKIAPLANTEDATTACH123"),
    "OpenAI key": ("sk-proj-plantedAttachOpenAI0123456789", "sk-proj-plantedAttachOpenAI0123456789"),
    "JWT": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhdHRhY2gifQ.cGxhbnRlZEF0dGFjaA",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhdHRhY2gifQ.cGxhbnRlZEF0dGFjaA"),
    "URL user info": ("urlAttachPw-6610", "https://ci:urlAttachPw-6610@git.example/r.git"),
    "password: first in an option string": ("firstPairPw-8871", "password:firstPairPw-8871,expandable_segments:True"),
    "password: a word in an option string": ("supersecretword", "expandable_segments:True,password:supersecretword"),
    "api_key= in an option string": ("optKey-44120", "mode:fast,api_key=optKey-44120"),
}
# Evidence that must survive: a parser's place after "token:", the allocator settings, GPU variables.
ATTACHED_KEPT = ("unclosed token: line 1, column 11", "expandable_segments:True", "HIP_VISIBLE_DEVICES", "gfx1100")
SIGNATURE_LINE = "Memory access fault by GPU node-1 (Agent handle: 0x5) on address (nil). Reason: Unknown."


def _user_probe(texts) -> str:
    """A user's probe whose source carries every plant: assigned, in a comment, and after an
    escaped newline and tab inside a string (a reproducer embeds the source verbatim)."""
    lines = ['"""A user probe that talks to chat and CI services."""', "import rocmcheck", ""]
    for i, text in enumerate(texts):
        lines += [f"PLANT_{i} = {text!r}", f"# {text}", f'NOTE_{i} = "sent\\n{text}\\tand\\t{text}"']
    lines += ["", "", '@rocmcheck.probe("user-notify", title="notify", targets="chat", timeout=30)',
              "def notify(ctx):", '    raise AssertionError("unclosed token: line 1, column 11")', ""]
    return "\n".join(lines)


def test_no_planted_secret_reaches_any_file_of_the_attachment(tmp_path, monkeypatch, capsys):
    """Issue 31 item 4: planted in a saved run's environment blocks (GPU variables included),
    message and evidence, in the process's own allow-listed variables, in the user probe's source
    the reproducer embeds, and in the log; no file `report` writes, nor its output, keeps one."""
    texts = [text for _, text in ATTACHED.values()]
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "user_notify.py").write_text(_user_probe(texts))
    env = {f"HIP_PLANT_{i}": text for i, text in enumerate(texts)}
    env.update(PYTORCH_CUDA_ALLOC_CONF=ATTACHED["password: first in an option string"][1],
               PYTORCH_HIP_ALLOC_CONF=ATTACHED["password: a word in an option string"][1], HIP_VISIBLE_DEVICES="0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    joined = " ".join(texts)
    verdict = {"probe": "user-notify", "variant": "user-notify", "status": "fail", "params": {}, "env": env,
               "message": f"unclosed token: line 1, column 11; PYTORCH_CUDA_ALLOC_CONF={env['PYTORCH_CUDA_ALLOC_CONF']}"
                          f" {joined}",
               "duration_s": 0.1, "measurements": {"note": joined}, "known_issues": [],
               "evidence": {"output_tail": "\n".join(texts), "stack": json.dumps({"log": "\n".join(texts)})}}
    saved = {"schema": "rocmcheck-report", "schema_version": "1.3", "tool": {"name": "rocmcheck", "version": "0.1.0"},
             "run": {"id": "planted", "device": "cuda:0", "profile": "full", "isolation": "zygote", "env": env,
                     "argv": ["run"], "started": 1.7e9, "inject": ""},
             "fingerprint": {"host": {"system": "Linux", "python": "3.11.7", "env": env},
                             "device_facts": {"torch": "2.9.1+rocm6.4", "rocm": "6.4", "backend": "rocm",
                                              "devices": [{"index": 0, "name": "Radeon", "arch": "gfx1100",
                                                           "memory_bytes": 2 ** 34}]}},
             "verdicts": [verdict]}
    (tmp_path / "R.json").write_text(json.dumps(saved))
    log = "\n".join([f"{SIGNATURE_LINE} {text}" for text in texts]
                    + [json.dumps({"msg": f"{SIGNATURE_LINE}\n{text}"}) for text in texts])
    (tmp_path / "train.log").write_text(log + "\n")
    out = tmp_path / "attach"
    out.mkdir()
    assert main(["report", "--from", str(tmp_path / "R.json"), "-o", str(out / "bug.md"),
                 "--probes-path", str(probes), "--log", str(tmp_path / "train.log")]) == 0
    captured = capsys.readouterr()

    files = {p.name: p.read_text() for p in out.iterdir()}
    assert set(files) == {"bug.md", "bug.json", "bug-repro-user-notify.py"}, sorted(files)
    assert "NOTE_0 = " in files["bug.md"] and "NOTE_0 = " in files["bug-repro-user-notify.py"]  # the source is in
    assert "## The log" in files["bug.md"] and "Recognised lines" in files["bug.md"]
    leaked = {kind: [name for name, text in {**files, "stdout": captured.out, "stderr": captured.err}.items()
                     if needle in text]
              for kind, (needle, _) in ATTACHED.items()}
    leaked = {kind: where for kind, where in leaked.items() if where}
    print(f"secret kinds planted: {len(ATTACHED)}, leaked: {len(leaked)}")
    assert not leaked, leaked
    for kept in ATTACHED_KEPT:  # over-redaction would destroy evidence
        assert kept in files["bug.md"] and kept in files["bug.json"], kept
    assert "`HIP_VISIBLE_DEVICES=0`" in files["bug.md"]
    summary = next(line for line in files["bug.md"].splitlines() if line.startswith("> Redacted"))
    assert REDACTED not in summary and "Slack token" in summary, summary  # the counts stay readable


def test_every_file_of_the_attachment_is_redacted_as_it_is_written(tmp_path):
    """Issue 31 item 4: `bugreport.write` is the one way out, so a section that skipped the
    redactor (here: text put into the Markdown, the twin and a reproducer after `build`)
    still leaves no secret in any file."""
    from dataclasses import replace

    from rocmcheck.outputs import bugreport, repro
    from rocmcheck.records import Report

    token, password = ATTACHED["Slack bot token"][0], ATTACHED["password: first in an option string"]
    bug = bugreport.build(Report.from_dict({"schema": "rocmcheck-report", "schema_version": "1.3", "verdicts": []}))
    late = f"`PYTORCH_CUDA_ALLOC_CONF={password[1]}` {token}"
    script = f'SOURCE = r"""\nSLACK = "{token}"\nCONF = "{password[1]}"\n"""\n'
    bug = replace(bug, markdown=bug.markdown + late, data={**bug.data, "late": late},
                  reproducers=[repro.Reproducer("v", "bug-repro-v.py", script, "m")])
    paths = bugreport.write(bug, tmp_path / "bug.md")
    assert [p.name for p in paths] == ["bug.md", "bug.json", "bug-repro-v.py"]
    for path in paths:
        text = path.read_text()
        assert token not in text and password[0] not in text and REDACTED in text, path.name
        assert "expandable_segments:True" in text, path.name
    late_in_twin = json.loads(paths[1].read_text())["late"]
    assert late_in_twin == f"`PYTORCH_CUDA_ALLOC_CONF=password:{REDACTED},expandable_segments:True` {REDACTED}"
