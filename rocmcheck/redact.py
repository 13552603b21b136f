"""Keep secrets out of what leaves the machine: an environment allow-list, a secret-name
deny-list applied even inside it, and value patterns run over every string of a report
(captured output, stacks, tracebacks and argv included).

Sources (docs/design.md, "Secret redaction"): vLLM collect_env's prefix allow-list, sentry-python's
DEFAULT_DENYLIST and detect-secrets' keyword plugin for names, gitleaks rules for values.
A redacted value reads `[REDACTED]`; `Redactor.counts()` says how many distinct values of
which kind were redacted, never the values. `anonymize=True` also replaces the home
directory, user name, host name and IP addresses.
"""
from __future__ import annotations

import getpass
import ipaddress
import re
import socket
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Pattern, Set, Tuple

# Environment variables a GPU report needs (by prefix) ...
ENV_PREFIXES = ("HSA_", "HIP_", "ROCR_", "ROCM_", "AMD_", "MIOPEN_", "PYTORCH_", "TORCH_", "CUDA_", "NCCL_",
                "RCCL_", "HIPBLASLT_", "ROCBLAS_", "TENSILE_", "GPU_", "OMP_", "MKL_", "NVIDIA_", "CUBLAS_")
# ... minus any whose name looks secret, even inside the allow-list.
ENV_DENY_WORDS = ("TOKEN", "SECRET", "PASSW", "PWD", "KEY", "AUTH", "CREDENTIAL", "COOKIE", "SESSION", "PRIVATE")

REDACTED = "[REDACTED]"
_DENY = "|".join(ENV_DENY_WORDS)

# (kind, pattern, group holding the secret). Lenient on lengths: a false positive costs a
# few characters of a report, a false negative leaks a credential.
VALUE_RULES: Tuple[Tuple[str, Pattern[str], int], ...] = (
    ("GitHub token", re.compile(r"\b(gh[pousr]_[0-9A-Za-z]{36,}|github_pat_\w{22,})"), 1),
    ("Hugging Face token", re.compile(r"\b((?:hf_|api_org_)[A-Za-z0-9]{34,})"), 1),
    ("AWS access key id", re.compile(r"\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})\b"), 1),
    ("OpenAI-style key", re.compile(r"(?<![\w-])(sk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,})"), 1),
    ("credentials in a URL", re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^\s/?#@:'\"]+:[^\s/?#'\"]*)@"), 1),
    # NAME=value and 'NAME': 'value' where NAME is environment-style and looks secret
    ("secret-named value", re.compile(rf"\b[A-Z0-9_]*(?:{_DENY})[A-Z0-9_]*=['\"]?([^\s'\"\\,;`]+)"), 1),
    ("secret-named value", re.compile(rf"['\"][A-Z0-9_]*(?:{_DENY})[A-Z0-9_]*['\"]\s*:\s*['\"]([^'\"\\]+)['\"]"), 1),
    # --hf-token VALUE, --password=VALUE on a command line; ?token=VALUE in a URL
    ("secret option", re.compile(rf"(?<![\w-])--?[A-Za-z0-9_-]*(?:{_DENY})[A-Za-z0-9_-]*(?:=|\s+)['\"]?([^\s'\"\\,`]+)",
                                 re.I), 1),
    ("secret URL parameter",
     re.compile(rf"[?&][A-Za-z0-9_.-]*(?:{_DENY}|sig)[A-Za-z0-9_.-]*=([^&\s#'\"\\`]+)", re.I), 1),
)


_SECRET_OPTION = re.compile(rf"--?[A-Za-z0-9_-]*(?:{_DENY})[A-Za-z0-9_-]*$", re.I)


def secret_name(name: str) -> bool:
    """Whether an environment variable's name suggests a credential."""
    return any(word in name.upper() for word in ENV_DENY_WORDS)


def gpu_env_name(name: str) -> bool:
    """Whether a variable belongs in a GPU report: allow-listed prefix, not secret-looking."""
    return name.startswith(ENV_PREFIXES) and not secret_name(name)


def _ip_rule() -> Tuple[str, Pattern[str], int]:
    v4 = r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]*\d)"
    v6 = r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:.])"  # candidates; ipaddress decides
    return "IP address", re.compile(f"({v4}|{v6})"), 1


def _identity_rules() -> List[Tuple[str, Pattern[str], int]]:
    """This machine's home directory, user and host, plus anybody's home directory path."""
    rules = []
    home = str(Path.home())
    if len(home) > 1:
        rules.append(("home directory", re.compile(re.escape(home) + r"(?![\w.-])"), 0))
    rules.append(("home directory", re.compile(r"(?:/home/|/Users/|[A-Za-z]:\\Users\\)[^/\\\s'\"]+"), 0))
    user = _guarded(getpass.getuser)
    if user and len(user) >= 3:
        rules.append(("user name", re.compile(rf"(?<![\w-]){re.escape(user)}(?![\w-])"), 0))
    for host in {h for h in (_guarded(socket.gethostname), _guarded(lambda: socket.gethostname().split(".")[0])) if h}:
        if len(host) >= 3 and host != "localhost":
            rules.append(("host name", re.compile(rf"(?<![\w-]){re.escape(host)}(?![\w-])"), 0))
    return rules


def _guarded(fn: Callable[[], str]) -> Optional[str]:
    try:
        return fn()
    except Exception:  # no passwd entry, no host name: nothing to replace
        return None


ANON_REPLACEMENTS = {"home directory": "~", "user name": "<user>", "host name": "<host>", "IP address": "<ip>"}


def _public_ip(text: str) -> bool:
    """Loopback and unspecified addresses identify nobody; versions like 1.2.3.400 are no IP."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return not (address.is_loopback or address.is_unspecified)


class Redactor:
    """Applies the rules to strings and report data, remembering what it redacted."""

    def __init__(self, anonymize: bool = False):
        self.anonymize = anonymize
        self.rules = list(VALUE_RULES)
        if anonymize:
            self.rules += [*_identity_rules(), _ip_rule()]
        self.found: Dict[str, Set[str]] = {}
        self.omitted_env: Set[str] = set()

    def _note(self, kind: str, value: str) -> None:
        self.found.setdefault(kind, set()).add(value)

    def text(self, text: str) -> str:
        """`text` with every secret (and, anonymizing, every identity) replaced."""
        for kind, pattern, group in self.rules:
            text = pattern.sub(lambda m, k=kind, g=group: self._replace(m, k, g), text)
        return text

    def _replace(self, match: "re.Match[str]", kind: str, group: int) -> str:
        value = match.group(group)
        if value == REDACTED or value in ANON_REPLACEMENTS.values():
            return match.group(0)
        if kind == "IP address" and not _public_ip(value):
            return match.group(0)
        self._note(kind, value)
        start, end = match.start(group) - match.start(0), match.end(group) - match.start(0)
        whole = match.group(0)
        return whole[:start] + ANON_REPLACEMENTS.get(kind, REDACTED) + whole[end:]

    def env(self, environ: Mapping[str, Any]) -> Dict[str, Any]:
        """The allow-listed variables; a secret-looking name keeps its name, not its value."""
        kept: Dict[str, Any] = {}
        for name, value in environ.items():
            if not str(name).startswith(ENV_PREFIXES):
                self.omitted_env.add(str(name))
            elif secret_name(str(name)):
                self._note("secret-named variable", str(value))
                kept[name] = REDACTED
            else:
                kept[self.text(str(name))] = self.data(value)
        return kept

    def data(self, value: Any) -> Any:
        """A redacted copy of JSON-like data; every dict under an "env" key is filtered."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.env(v) if k == "env" and isinstance(v, dict) else self.data(v)
                    for k, v in value.items()}
        if isinstance(value, list):
            return self._argv([self.data(v) for v in value])
        return value

    def _argv(self, items: List[Any]) -> List[Any]:
        """In a list like sys.argv, the item after a secret-looking option (`--token`, `VALUE`)."""
        for i in range(1, len(items)):
            option = items[i - 1]
            if isinstance(option, str) and _SECRET_OPTION.match(option) and isinstance(items[i], str) \
                    and items[i] != REDACTED:
                self._note("secret option", items[i])
                items[i] = REDACTED
        return items

    def counts(self) -> Dict[str, int]:
        return {kind: len(values) for kind, values in sorted(self.found.items())}

    def summary(self) -> str:
        """One sentence for the report: how many values of which kind, never the values."""
        secret = {k: n for k, n in self.counts().items() if k not in ANON_REPLACEMENTS}
        parts = [f"{kind}: {n}" for kind, n in secret.items()]
        text = f"Redacted {sum(secret.values())} value(s) ({', '.join(parts)})." if parts else \
            "No secret matched the redaction rules."
        if self.omitted_env:
            text += f" {len(self.omitted_env)} environment variable(s) outside the GPU allow-list left out."
        if self.anonymize:
            anon = [kind for kind in ANON_REPLACEMENTS if kind in self.found]
            text += f" Anonymized: {', '.join(anon) or 'nothing found to replace'}."
        return text

