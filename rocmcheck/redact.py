"""Keep secrets out of what leaves the machine: an environment allow-list, a secret-name
deny-list applied even inside it, the values of this machine's secret-named variables,
and value rules run over every string (captured output, stacks, tracebacks and argv included).

`safetext.clean` applies them where a verdict's text is first built, so run reports, the
journal, the node verdict and the terminal are clean by construction; `bugreport` applies
them again (with the environment allow-list) to whatever report it is given, and to each
file of the attachment as it writes it.

Sources (docs/design.md, "Secret redaction"): vLLM collect_env's prefix allow-list, sentry-python's
DEFAULT_DENYLIST and detect-secrets' keyword plugin for names, gitleaks rules for token shapes.
A redacted value reads `[REDACTED]`; `Redactor.counts()` says how many distinct values of
which kind were redacted, never the values. `anonymize=True` also replaces the home
directory, user name, host name and IP addresses.

Every rule runs in linear time: a variable-length run starts only where the run itself
starts (a look-behind on its own characters), and what follows it is checked in constant
time, so no input backtracks quadratically; a secret key's value is read to the end of its
run only where it is replaced, and no later match starts inside what was replaced.
"""
from __future__ import annotations

import getpass
import ipaddress
import os
import re
import socket
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from .wording import counted

# Environment variables a GPU report needs (by prefix) ...
ENV_PREFIXES = ("HSA_", "HIP_", "ROCR_", "ROCM_", "AMD_", "MIOPEN_", "PYTORCH_", "TORCH_", "CUDA_", "NCCL_",
                "RCCL_", "HIPBLASLT_", "ROCBLAS_", "TENSILE_", "GPU_", "OMP_", "MKL_", "NVIDIA_", "CUBLAS_")
# ... minus any whose name looks secret, even inside the allow-list.
ENV_DENY_WORDS = ("TOKEN", "SECRET", "PASSW", "PWD", "KEY", "AUTH", "CREDENTIAL", "COOKIE", "SESSION", "PRIVATE")
# Names the deny-list catches that hold no secret (the working folder, the desktop session).
ENV_NOT_SECRET = ("PWD", "OLDPWD", "DESKTOP_SESSION", "XDG_", "DBUS_SESSION_BUS_ADDRESS")
# A secret-named variable's value is redacted wherever it appears once it is this long
# (shorter values, such as "1" or "true", would redact ordinary text).
MIN_ENV_VALUE_CHARS = 6
# Keys in any case (`password=`, `"api_key": `, `X-Api-Key:`) are secret when they end with one of
# these; narrower than ENV_DENY_WORDS so that `key_padding_mask=` or `max_new_tokens=` stay.
KEY_ENDINGS = ("password", "passwd", "passphrase", "pwd", "secret", "token", "apikey", "api_key", "access_key",
               "private_key", "secret_key", "auth_key", "credential", "credentials", "cookie", "session_id",
               "sessionid", "client_secret")
# Keys that end like a secret and are none (tokenizer special tokens, counters).
KEY_NOT_SECRET = re.compile(r"(?:^|_)(?:pad|eos|bos|unk|sep|cls|mask|start|end|special|next|num|max|min|first|"
                            r"last|total|new|input|output|prompt|completion)_token$")
# An unquoted value that is one of these is a type or a constant in code, not a secret.
CODE_WORDS = ("str", "bytes", "int", "bool", "None", "True", "False", "Optional", "Any", "self")
URL_PARAM_SECRETS = ("sig", "signature", "key", "code", "x_amz_signature", "x_amz_credential", "x_amz_security_token")

REDACTED = "[REDACTED]"

# Where a secret may start: not inside a word, or right after an escaped line break or tab (`\n`,
# `\t`, `\r` as two characters: a string literal in source code, a JSON log line, a repr).
_START = r"(?:(?<![\w-])|(?<=\\[nrt]))"

# One table of token shapes, each recognisable without context (gitleaks' rules, lenient on
# length: a false positive costs a few characters of a report, a false negative leaks a credential).
# A token starts a word (checked after the match, so that each pattern keeps its literal prefix,
# which the regex engine searches for fast; a shape that needs something after a run of any
# length anchors its start in the pattern instead); group 1, where there is one, is the secret.
TOKEN_SHAPES: Tuple[Tuple[str, str], ...] = (
    ("GitHub token", r"gh[pousr]_[0-9A-Za-z]{20,}|github_pat_\w{22,}"),
    ("GitLab token", r"gl(?:pat|dt|ptt|rt|cbt|oas|soat|ft|imt|agent)-[0-9A-Za-z_-]{8,}(?:\.[0-9A-Za-z_-]+)*"),
    ("Hugging Face token", r"(?:hf_|api_org_)[A-Za-z0-9]{16,}"),
    ("Slack token", r"(?:xoxe\.)?xox[abeposr]-[0-9A-Za-z-]{6,}|xapp-\d-[0-9A-Za-z-]{10,}"),
    ("Slack webhook", r"hooks\.slack\.com/((?:services|workflows)/[0-9A-Za-z/_-]{20,})"),
    ("AWS access key id", r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?!\w)"),
    ("Google API key", r"AIza[0-9A-Za-z_-]{35}"),
    ("Google OAuth token", r"ya29\.[0-9A-Za-z_-]{20,}"),
    ("Azure client secret", r"[0-9A-Za-z_~.]{3}\dQ~[0-9A-Za-z_~.-]{31,34}(?![\w~.-])"),
    ("OpenAI-style key", r"sk-(?:proj-|svcacct-|admin-|ant-(?:api|admin)\d\d-|ant-)?[0-9A-Za-z_-]{20,}"),
    ("Stripe key", r"[rs]k_(?:live|test)_[0-9A-Za-z]{16,}"),
    ("npm token", r"npm_[0-9A-Za-z]{30,}"),
    ("PyPI token", r"pypi-AgE[0-9A-Za-z_-]{30,}"),
    ("Docker Hub token", r"dckr_pat_[0-9A-Za-z_-]{20,}"),
    ("JSON web token", _START + r"eyJ[0-9A-Za-z_-]{8,}\.eyJ[0-9A-Za-z_-]{8,}\.[0-9A-Za-z_-]*"),  # run, then "."
)

Span = Optional[Tuple[int, int]]  # where the secret is inside a match; None: no secret after all


class Rule:
    """A pattern and how to find the secret in its match (by default: group 1, or the whole match)."""

    def __init__(self, kind: str, pattern: str, secret: Optional[Callable[["re.Match[str]"], Span]] = None,
                 flags: int = 0):
        self.kind, self.pattern = kind, re.compile(pattern, flags)
        self.secret = secret or (lambda m: m.span(1) if m.re.groups else m.span())


def _key_value(m: "re.Match[str]") -> Span:
    """`key=value`, `key: value` or `"key": "value"`: the value when the key looks secret and
    the value is no code (a traceback quotes source lines such as `token = new_token()`).

    The match ends at the separator (the value is looked at, not taken), so a value that is
    itself an option string is searched too: `PYTORCH_CUDA_ALLOC_CONF=password:pw,...`. A bare
    value is read up to the next `:` or `=`, so that such a pair is found; a secret one is
    redacted to the end of its run (`token=abc:def==` loses `abc:def==`)."""
    if not secret_key(m.group("key")):
        return None
    group = next(g for g in ("q1", "q2", "bare") if m.group(g) is not None)
    value = m.group(group)
    if group != "bare":
        return None if _names_a_variable(value, quoted=True) else m.span(group)
    if _PARSER_LOCATION.match(m.string, m.start(group)):
        return None  # a parser's place, not a value: expat's "unclosed token: line 5, column 11"
    pair = m.group("sep") == ":" and not m.group("space")  # `password:pw` in an option string, never code
    code = value in CODE_WORDS or m.string[m.end(group):m.end(group) + 1] in ("(", "[")
    if not pair and (code or _names_a_variable(value, quoted=False)):
        return None  # `token=token`, `token: str`, `key = f(...)`, `api_key = self.api_key`
    run = _BARE_RUN.match(m.string, m.start(group))
    assert run is not None  # the run matches where the value did
    return m.start(group), run.end()


def _names_a_variable(value: str, quoted: bool) -> bool:
    """Whether a secret key's value is a name, not a secret: an environment variable's name
    (`"TOKEN_ENV": "HF_TOKEN"`) or, unquoted, an identifier whose last word is a secret word
    (`token=token`, `password = args.db_password`); `password:supersecret` is a value."""
    if _ENV_NAME.fullmatch(value):
        return secret_name(value)
    return not quoted and bool(_IDENTIFIER.fullmatch(value) and _SECRET_WORD_LAST.search(value.lower()))


def _option(m: "re.Match[str]") -> Span:
    return m.span("value") if secret_key(m.group("key")) else None


def _url_param(m: "re.Match[str]") -> Span:
    key = m.group("key").lower().replace("-", "_")
    return m.span("value") if key in URL_PARAM_SECRETS or secret_key(key) else None


def _userinfo(m: "re.Match[str]") -> Span:
    """The password of a URL's user info (with or without a user name); a user name alone
    only when it is long enough to be a token."""
    start, end = m.span("userinfo")
    colon = m.group("userinfo").find(":")
    if colon >= 0:
        return (start + colon + 1, end) if end > start + colon + 1 else None
    return (start, end) if end - start >= 16 else None


_VALUE_END = r"\s'\"`,;&(){}\[\]<>\\"
# Context rules: a secret told by what precedes it. Options and URL parameters come before
# the key=value rule, which would otherwise claim them.
CONTEXT_RULES: Tuple[Rule, ...] = (
    Rule("credentials in a URL", r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://(?P<userinfo>[^\s/?#'\"<>]*)@",
         _userinfo),
    Rule("authorization header", _START + r"(?:proxy-)?authorization['\"]?[ \t]*[:=][ \t]*['\"]?"
         r"(?:(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+)?([^\s'\"]+)", flags=re.I),
    Rule("authorization header", _START + r"bearer[ \t]+([0-9A-Za-z._~+/-]{8,}=*)", flags=re.I),
    Rule("cookie", _START + r"(?:set-)?cookie['\"]?[ \t]*:[ \t]*([^\n]+)", flags=re.I),
    Rule("secret option", _START + rf"(?P<key>--?[A-Za-z][\w-]{{0,99}})(?:=|[ \t]+)['\"]?(?P<value>[^{_VALUE_END}]+)",
         _option),
    Rule("secret URL parameter", rf"[?&](?P<key>[\w.-]{{1,100}})=(?P<value>[^&#{_VALUE_END}]+)", _url_param),
    # a key starts no path's last part (`cat: /run/secrets/db_password: Permission denied`)
    Rule("secret-named value", r"(?<![\w./-])(?P<key>[A-Za-z_][\w.-]{0,99})['\"]?[ \t]*(?P<sep>[:=])(?![:=])"
         r"(?P<space>[ \t]*)(?=(?:'(?P<q1>[^'\n]{1,256})'|\"(?P<q2>[^\"\n]{1,256})\""
         rf"|(?P<bare>[^{_VALUE_END}:=]+)))", _key_value),
)
def _token(m: "re.Match[str]") -> Span:
    start = m.start()
    before = m.string[start - 1] if start else " "
    escaped = before in "nrt" and m.string[start - 2:start - 1] == "\\"  # `\nxoxb-...`: a new line
    if (before.isalnum() or before in "_-~.") and not escaped:
        return None
    return m.span(1) if m.re.groups else m.span()


VALUE_RULES: Tuple[Rule, ...] = (*(Rule(kind, pattern, _token) for kind, pattern in TOKEN_SHAPES), *CONTEXT_RULES)

_IDENTIFIER = re.compile(r"[\w.-]+")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+")
_SECRET_WORD_LAST = re.compile(r"(?:^|[._-])(?:" + "|".join(KEY_ENDINGS) + r")$")
_BARE_RUN = re.compile(rf"[^{_VALUE_END}]*")
# Where a parser stopped, as expat and Python's parsers say it after a colon. Only the bare word
# `line` followed by this shape is spared, so a real value after `token:` still goes.
_PARSER_LOCATION = re.compile(r"line \d+, column \d+\b")
_ENV_STYLE = re.compile(r"[A-Z][A-Z0-9_]*")
_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# A key's body: whitespace-separated base64 words of 16 characters or more (a PEM line has 64).
_KEY_WORDS = r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/=]{16,}(?![A-Za-z0-9+/=])(?:\s+[A-Za-z0-9+/=]{16,}(?![A-Za-z0-9+/=]))*\s*"
_KEY_LINES, _KEY_AFTER = re.compile(_KEY_WORDS), re.compile(r"\s*" + _KEY_WORDS)


def _after(pattern: "re.Pattern[str]", text: str, pos: int,
           last: Optional["re.Match[str]"]) -> Optional["re.Match[str]"]:
    """The first match of `pattern` at or after `pos`, given the `last` one found before it
    (None: there was none, so there is none further on either): each marker is searched once."""
    if last is None or last.start() >= pos:
        return last
    return pattern.search(text, pos)


def secret_name(name: str) -> bool:
    """Whether an environment variable's name suggests a credential."""
    upper = name.upper()
    return any(word in upper for word in ENV_DENY_WORDS) and not upper.startswith(ENV_NOT_SECRET)


def secret_key(key: str) -> bool:
    """Whether a key in text (`NAME=`, `password:`, `"api_key":`, `--hf-token`) names a secret:
    an environment-style name by the deny-list, any other by how it ends."""
    key = key.lstrip("-")
    if _ENV_STYLE.fullmatch(key):
        return secret_name(key)
    key = key.lower().replace("-", "_").replace(".", "_")
    return key.endswith(KEY_ENDINGS) and not KEY_NOT_SECRET.search(key)


def gpu_env_name(name: str) -> bool:
    """Whether a variable belongs in a GPU report: allow-listed prefix, not secret-looking."""
    return name.startswith(ENV_PREFIXES) and not secret_name(name)


def env_secret_values(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """The values of this machine's secret-named variables, longest first."""
    environ = os.environ if environ is None else environ
    values = {str(v).strip() for k, v in environ.items() if secret_name(str(k))}
    return sorted((v for v in values if len(v) >= MIN_ENV_VALUE_CHARS), key=len, reverse=True)


def _ip_rule() -> Rule:
    v4 = r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]*\d)"
    v6 = r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:.])"  # candidates; ipaddress decides
    return Rule("IP address", f"({v4}|{v6})", lambda m: m.span(1) if _public_ip(m.group(1)) else None)


def _identity_rules() -> List[Rule]:
    """This machine's home directory, user and host, plus anybody's home directory path."""
    rules = []
    home = str(Path.home())
    if len(home) > 1:
        rules.append(Rule("home directory", re.escape(home) + r"(?![\w.-])"))
    rules.append(Rule("home directory", r"(?:/home/|/Users/|[A-Za-z]:\\Users\\)[^/\\\s'\"]+"))
    user = _guarded(getpass.getuser)
    if user and len(user) >= 3:
        rules.append(Rule("user name", rf"(?<![\w-]){re.escape(user)}(?![\w-])"))
    for host in {h for h in (_guarded(socket.gethostname), _guarded(lambda: socket.gethostname().split(".")[0])) if h}:
        if len(host) >= 3 and host != "localhost":
            rules.append(Rule("host name", rf"(?<![\w-]){re.escape(host)}(?![\w-])"))
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
    """Applies the rules to strings and report data, remembering what it redacted.

    `allow_list` keeps only the GPU allow-list of an environment block (a bug report); without
    it every name stays and only secret-named values go (a run report). The secret-named
    variables' values are read from `environ` (default: this process's) when it is made."""

    def __init__(self, anonymize: bool = False, allow_list: bool = True,
                 environ: Optional[Mapping[str, str]] = None):
        self.anonymize, self.allow_list = anonymize, allow_list
        self.rules: List[Rule] = []
        values = env_secret_values(environ)
        if values:
            self.rules.append(Rule("secret-named variable", "|".join(map(re.escape, values))))
        self.rules += VALUE_RULES
        if anonymize:
            self.rules += [*_identity_rules(), _ip_rule()]
        self.found: Dict[str, Set[str]] = {}
        self.omitted_env: Set[str] = set()

    def _note(self, kind: str, value: str) -> None:
        self.found.setdefault(kind, set()).add(value)

    def text(self, text: str) -> str:
        """`text` with every secret (and, anonymizing, every identity) replaced."""
        text = self._private_keys(text)
        for rule in self.rules:
            text = self._apply(rule, text)
        return text

    def _apply(self, rule: Rule, text: str) -> str:
        """`text` with each secret `rule` finds replaced. A secret may end past its match (a
        key's value, looked at but not taken); a match that starts inside a replaced one is
        skipped, so each character is replaced at most once."""
        out: List[str] = []
        pos = 0
        for match in rule.pattern.finditer(text):
            span = None if match.start() < pos else rule.secret(match)
            if span is None or span[0] < pos:
                continue
            value = text[span[0]:span[1]]
            if not value or value == REDACTED or value in ANON_REPLACEMENTS.values():
                continue
            self._note(rule.kind, value)
            out += [text[pos:span[0]], ANON_REPLACEMENTS.get(rule.kind, REDACTED)]
            pos = span[1]
        return "".join(out) + text[pos:] if out else text

    def _private_keys(self, text: str) -> str:
        """PEM private key blocks, also cut ones: from a BEGIN without END the key lines after
        it go, before an END without BEGIN (the head cut away) the key lines before it."""
        if "PRIVATE KEY" not in text:
            return text
        out, pos, begin, end = [], 0, _PEM_BEGIN.search(text), _PEM_END.search(text)
        while begin or end:
            if end and (not begin or end.start() < begin.start()):  # END first: its BEGIN was cut
                lines = [m for m in _KEY_LINES.finditer(text, pos, end.start()) if m.end() == end.start()]
                start = lines[-1].start() if lines else end.start()
                out += [text[pos:start], self._key(text[start:end.start()], "", "\n"), end.group()]
                pos = end.end()
            else:
                assert begin is not None  # the loop runs while one is found; END alone took the branch above
                end = _after(_PEM_END, text, begin.end(), end)
                key = None if end else _KEY_AFTER.match(text, begin.end())
                stop = end.start() if end else key.end() if key else begin.end()
                out += [text[pos:begin.end()], self._key(text[begin.end():stop], "\n", "\n")]
                pos = stop
                if end:
                    out.append(end.group())
                    pos = end.end()
            begin, end = _after(_PEM_BEGIN, text, pos, begin), _after(_PEM_END, text, pos, end)
        return "".join(out) + text[pos:]

    def _key(self, body: str, before: str, after: str) -> str:
        if not body.strip():
            return body
        self._note("private key", body)
        return before + REDACTED + after

    def env(self, environ: Mapping[str, Any]) -> Dict[str, Any]:
        """An environment block: a secret-looking name keeps its name, not its value; with the
        allow-list, only GPU variables are kept."""
        kept: Dict[str, Any] = {}
        for name, value in environ.items():
            if self.allow_list and not str(name).startswith(ENV_PREFIXES):
                self.omitted_env.add(str(name))
            elif secret_name(str(name)):
                if value != REDACTED:  # redacted as the run recorded it
                    self._note("secret-named variable", str(value))
                kept[self.text(str(name))] = REDACTED
            else:
                kept[self.text(str(name))] = self.data(value)
        return kept

    def data(self, value: Any) -> Any:
        """A redacted copy of JSON-like data; every dict under an "env" key is an environment block."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k:
                    self.env(v) if k == "env" and isinstance(v, dict) else self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return self._argv([self.data(v) for v in value])
        return value

    def _argv(self, items: List[Any]) -> List[Any]:
        """In a list like sys.argv, the item after a secret-looking option (`--token`, `VALUE`)."""
        for i in range(1, len(items)):
            option = items[i - 1]
            if isinstance(option, str) and option.startswith("-") and secret_key(option) \
                    and isinstance(items[i], str) and items[i] != REDACTED:
                self._note("secret option", items[i])
                items[i] = REDACTED
        return items

    def counts(self) -> Dict[str, int]:
        return {kind: len(values) for kind, values in sorted(self.found.items())}

    def summary(self, already: int = 0) -> str:
        """One sentence for the report: how many values of which kind, never the values;
        `already`: how many the run itself had redacted when it recorded them."""
        secret = {k: n for k, n in self.counts().items() if k not in ANON_REPLACEMENTS}
        parts = [counted(n, kind) for kind, n in secret.items()]  # "kind: n" would read as a secret key's value
        text = f"Redacted {counted(sum(secret.values()), 'value')}: {', '.join(parts)}." if parts else \
            "No secret matched the redaction rules."
        if already:
            text += f" {already} more had been redacted as the run recorded them."
        if self.omitted_env:
            text += f" {counted(len(self.omitted_env), 'environment variable')} outside the GPU allow-list left out."
        if self.anonymize:
            anon = [kind for kind in ANON_REPLACEMENTS if kind in self.found]
            text += f" Anonymized: {', '.join(anon) or 'nothing found to replace'}."
        return text
