"""Secrets are redacted from every text loopwatch quotes (src/loopwatch/redact.py).

The secrets below are fake but in each format's real shape, and built at run time
(a literal token in the repository would be one more leaked-looking secret for
scanners to flag). CASES is shared with the tests of what the stores keep.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from loopwatch import Config, ConfigError, Guard
from loopwatch import redact as r
from loopwatch.cli import main
from loopwatch.text import preview

_RNG = random.Random(29)
_ALNUM = string.ascii_letters + string.digits


def _random(n: int, alphabet: str = _ALNUM) -> str:
    """n random characters, with a digit and a letter of each case (as real keys)."""
    body = "".join(_RNG.choice(alphabet) for _ in range(n - 3))
    return body + _RNG.choice(string.digits) + "q" + "Z"


def _b64(n: int) -> str:
    return _random(n, _ALNUM + "+/")


# (format, a command or arguments that carry it, the secret that must not be shown)
_TOKEN = _random(40)
CASES: list[tuple[str, str, str]] = [
    (
        "bearer header",
        f'curl -H "Authorization: Bearer {_TOKEN}" https://api.example.com/v1/models',
        _TOKEN,
    ),
    (
        "basic header",
        "curl -H 'Authorization: Basic "
        + (basic := base64.b64encode(f"admin:{_random(12)}".encode()).decode())
        + "' https://api.example.com",
        basic,
    ),
    (
        "OpenAI key",
        f"OPENAI_API_KEY=sk-proj-{(openai := _random(64, _ALNUM + '-_'))} python run.py",
        openai,
    ),
    (
        "Anthropic key",
        f"claude-client --key sk-ant-api03-{(anthropic := _random(90, _ALNUM + '-_'))} ask",
        anthropic,
    ),
    (
        "AWS access key",
        f"aws configure set aws_access_key_id AKIA{(aws := _random(16).upper())}",
        aws,
    ),
    (
        "AWS secret key",
        f"AWS_SECRET_ACCESS_KEY={(aws_secret := _b64(40))} aws s3 ls s3://bucket",
        aws_secret,
    ),
    (
        "GitHub token",
        f"git clone https://ghp_{(github := _random(36))}@github.com/acme/app.git",
        github,
    ),
    (
        "GitHub fine-grained token",
        f"gh auth login --with-token <<< github_pat_{(pat := _random(82, _ALNUM + '_'))}",
        pat,
    ),
    (
        "GitLab token",
        f'curl --header "PRIVATE-TOKEN: glpat-{(gitlab := _random(20))}" https://gitlab.com/api/v4',
        gitlab,
    ),
    (
        "Slack token",
        f"curl -d token=xoxb-{(slack := '1234567890-9876543210-' + _random(24))} https://slack.com/api",
        slack,
    ),
    (
        "Stripe key",
        f"stripe charges list --api-key sk_live_{(stripe := _random(24))}",
        stripe,
    ),
    (
        "Stripe restricted key",
        f"STRIPE=rk_live_{(stripe_rk := _random(24))} node pay.js",
        stripe_rk,
    ),
    (
        "Google API key",
        "curl https://maps.googleapis.com/maps/api/geocode/json?address=x&key=AIza"
        + (google := _random(35, _ALNUM + "-_")),
        google,
    ),
    (
        "Hugging Face token",
        f"huggingface-cli login --token hf_{(hf := _random(34))}",
        hf,
    ),
    (
        "npm token",
        f'echo "//registry.npmjs.org/:_authToken=npm_{(npm := _random(36))}" > ~/.npmrc',
        npm,
    ),
    (
        "PyPI token",
        "twine upload -u __token__ -p pypi-"
        + (pypi := "AgEIcHlwaS5vcmc" + _random(70, _ALNUM + "-_"))
        + " dist/*",
        pypi,
    ),
    (
        "JWT",
        "curl -b session="
        + (jwt := f"eyJ{_random(30)}.eyJ{_random(60)}.{_random(43, _ALNUM + '-_')}")
        + " https://app.example.com/me",
        jwt,
    ),
    (
        "private key",
        "printf '-----BEGIN OPENSSH PRIVATE KEY-----\\n"
        + (private := _b64(70))
        + "\\n-----END OPENSSH PRIVATE KEY-----\\n' > ~/.ssh/id_ed25519",
        private,
    ),
    (
        "password in a URL",
        f"psql postgresql://admin:{(url_pw := _random(14))}@db.internal:5432/app",
        url_pw,
    ),
    ("--password flag", f"mysql --password={(flag_pw := _random(12))} -e 'select 1'", flag_pw),
    ("--password value", f"pg_dump --password {(flag_pw2 := _random(12))} app", flag_pw2),
    ("password= env", f"PGPASSWORD={(env_pw := _random(10))} psql -h db app", env_pw),
    ("token= env", f"GITHUB_TOKEN={(env_token := _random(20))} gh pr list", env_token),
    ("secret=", f"deploy --client_secret={(client := _random(32))} prod", client),
    (
        "api_key= query",
        f'curl "https://api.example.com/data?api_key={(query := _random(32))}&page=2"',
        query,
    ),
    ("curl -u", f"curl -u admin:{(curl_pw := _random(12))} https://ci.example.com", curl_pw),
    (
        "JSON password",
        '{"host": "db", "password": "' + (json_pw := _random(9) + " with spaces") + '"}',
        json_pw,
    ),
]
_IDS = [c[0] for c in CASES]


@pytest.mark.parametrize(("fmt", "text", "secret"), CASES, ids=_IDS)
def test_each_format_is_redacted_and_the_command_stays_readable(
    fmt: str, text: str, secret: str
) -> None:
    out = r.redact(text)
    assert secret not in out
    if fmt == "private key":  # the block goes to its END line
        assert out == (
            "printf '-----BEGIN OPENSSH PRIVATE KEY-----[redacted]"
            "-----END OPENSSH PRIVATE KEY-----\\n' > ~/.ssh/id_ed25519"
        )
    else:  # the secret alone: the command, its other arguments, a key's prefix stay
        assert out == text.replace(secret, r.MARK)
    assert r.redact(out) == out  # redacting again changes nothing


def test_the_issue_examples_read_as_intended() -> None:
    assert (
        r.redact(f'curl -H "Authorization: Bearer {_TOKEN}" https://api.example.com/v1')
        == 'curl -H "Authorization: Bearer [redacted]" https://api.example.com/v1'
    )
    assert r.redact(f"OPENAI_API_KEY=sk-{_random(48)} python run.py") == (
        "OPENAI_API_KEY=sk-[redacted] python run.py"
    )
    assert r.redact("psql postgresql://admin:password@db:5432/app") == (
        "psql postgresql://admin:[redacted]@db:5432/app"
    )
    assert r.redact(f"git clone https://ghp_{_random(36)}@github.com/o/r.git") == (
        "git clone https://ghp_[redacted]@github.com/o/r.git"
    )


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens=1024 temperature=0.2",  # a count of tokens, not a token
        "token = get_token()",  # code: the value is computed
        "key = os.environ['API_KEY']",
        'curl -H "Authorization: Bearer $TOKEN" https://api.example.com',  # a variable
        "password: ${DB_PASSWORD}",
        "echo $PWD && OLDPWD=/tmp cd -",  # the working directory
        "git push -u origin main",  # -u without user:password
        "the bearer of bad news",
        "except KeyError: pass",
        "tokenizer = AutoTokenizer.from_pretrained('gpt2')",
        "grep -r 'PASSWORD= ' .",  # a name with nothing assigned
        "ls -la /app && cat README.md",
    ],
)
def test_no_secret_no_change(text: str) -> None:
    assert r.redact(text) == text


def test_only_the_secret_goes_from_a_json_arguments_string() -> None:
    args = '{"command":"export GITHUB_TOKEN=abc123secret && gh api user","timeout":30}'
    assert r.redact(args) == (
        '{"command":"export GITHUB_TOKEN=[redacted] && gh api user","timeout":30}'
    )
    escaped = '{"code":"requests.post(url, json={\\"password\\": \\"hunter 2\\"})"}'
    assert r.redact(escaped) == (
        '{"code":"requests.post(url, json={\\"password\\": \\"[redacted]\\"})"}'
    )


# -- the prefilter -----------------------------------------------------------------------
_PIECES = st.sampled_from(
    [*r.TRIGGERS, *(t.upper() for t in r.TRIGGERS), *(c[1] for c in CASES), "=", ":", '"',
     " ", "\\n", "-", "_", "/", "@", "é", "K", "ſ", "İ", "password", "Key"]
)  # fmt: skip
_TEXTS = st.lists(
    st.one_of(_PIECES, st.text(alphabet=string.printable + "éſİK", max_size=12)), max_size=12
).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TEXTS, st.integers(min_value=-1, max_value=120))
def test_the_automaton_and_the_string_tests_agree(text: str, end: int) -> None:
    """The compiled build's character scan and the pure build's string tests find the
    same triggers (ASCII letters in either case, nothing else folded)."""
    stop = len(text) if end < 0 or end > len(text) else end
    assert r._scan(text, stop) == r._search(text, stop)


@settings(max_examples=400, deadline=None)
@given(_TEXTS)
def test_every_rule_needs_a_trigger_at_or_before_its_secret(text: str) -> None:
    """What lets a preview look for triggers in the part it shows only: whenever a
    rule changes a text, one of its triggers ends at most 3 characters past the first
    changed character (the 3 characters a truncated preview gives up to "...")."""
    out = r._apply_rules(text)
    if out == text:
        return
    first = next(
        (i for i, (a, b) in enumerate(zip(text, out, strict=False)) if a != b),
        min(len(text), len(out)),
    )
    assert r.may_hold_secret(text, first + 3)


@settings(max_examples=200, deadline=None)
@given(_TEXTS)
# a key run on into a word that names another kind of secret once the key is redacted
@example("json?key=AIzaHNFclRPzQjSE-FztWudKIU5_IIPSkRtd3qZwhsec_pass")
def test_redacting_twice_is_redacting_once(text: str) -> None:
    once = r.redact(text)
    assert r.redact(once) == once


@pytest.mark.parametrize(("fmt", "text", "secret"), CASES, ids=_IDS)
@pytest.mark.parametrize("before", [0, 30, 60, 75, 120])
def test_a_preview_never_shows_a_secret_wherever_it_sits(
    fmt: str, text: str, secret: str, before: int
) -> None:
    """In the part shown, before the cut, across the cut, or past it."""
    filler = " ".join(["ls"] * (before // 3))[:before]
    shown = preview(f"{filler} {text} and then more words " * 2, 80)
    assert len(shown) <= 80
    for start in range(0, max(1, len(secret) - 7)):
        assert secret[start : start + 8] not in shown, shown


def test_an_arguments_preview_cut_inside_a_key_shows_none_of_it() -> None:
    """The guard previews the first 200 bytes of the arguments: a key cut there is
    redacted up to the cut, not shown in part."""
    key = _random(120, _ALNUM + "-_")
    guard = Guard(on_loop="warn")
    args = {"command": "x" * 170 + " sk-proj-" + key}
    for _ in range(4):
        verdict = guard.observe("r", {"kind": "tool_call", "name": "Bash", "args": args})
    state = guard.state("r")
    assert state is not None
    assert all(key[:6] not in c.args for c in state.calls)
    assert verdict.message is None or key[:6] not in verdict.message


@settings(max_examples=200, deadline=None)
@given(_TEXTS, st.integers(0, 300))
def test_a_preview_made_from_the_first_bytes_kept_is_the_preview_of_all(
    text: str, pad: int
) -> None:
    """A call keeps the first 200 bytes of its canonical arguments in memory and makes
    its preview from them when a message or a store first reads it: the same preview,
    as redacted, as one made from all of them."""
    from loopwatch.fingerprints import canonical_args
    from loopwatch.text import ARGS_PREVIEW_BYTES, args_preview

    raw = canonical_args({"command": "x" * pad + " " + text})
    (ticket,) = r.compile_patterns([r"corp-[0-9a-f]{8}"])
    for extra in ((), (ticket,)):
        assert args_preview(raw[:ARGS_PREVIEW_BYTES], extra) == args_preview(raw, extra)


# -- the user's own patterns ----------------------------------------------------------------
def test_configured_patterns_redact_too_in_messages_and_state() -> None:
    ticket = "corp-" + "0123456789abcdef" * 2
    guard = Guard(on_loop="warn", redact={"patterns": [r"corp-[0-9a-f]{32}"]})
    call = {"kind": "tool_call", "name": "Bash", "args": {"command": f"fetch {ticket}"}}
    result = {"kind": "tool_result", "name": "Bash", "text": "fetched 12 records of the store"}
    messages = []
    for _ in range(3):
        messages.append(guard.observe("r", call).message)
        state = guard.state("r")
        assert state is not None
        # what finds the arguments in the result is kept, never the arguments
        assert ticket[:8] not in repr([c.echo for c in state.calls])
        messages.append(guard.observe("r", result).message)
    state = guard.state("r")
    assert state is not None
    assert state.calls[0].args == '{"command":"fetch [redacted]"}'
    assert any(m and "fetch [redacted]" in m for m in messages)
    assert not any(m and ticket in m for m in messages)


def test_a_group_named_secret_redacts_that_part_only() -> None:
    (pattern,) = r.compile_patterns([r"ticket=(?P<secret>\d+)"])
    assert r.redact_extra("open ticket=12345 now", (pattern,)) == "open ticket=[redacted] now"


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        (["ok", "a("], r"\[redact\] patterns\[1\] in loopwatch.toml is not a valid regular"),
        (["x*"], r"\[redact\] patterns\[0\] in loopwatch.toml 'x\*' matches the empty string"),
        ("corp-.*", r"\[redact\] patterns in loopwatch.toml must be a list"),
        ([3], r"\[redact\] patterns\[0\] in loopwatch.toml must be a non-empty regular"),
    ],
)
def test_bad_patterns_are_refused_at_load_naming_the_key(patterns: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        Config.from_mapping({"redact": {"patterns": patterns}}, source="loopwatch.toml")


def test_an_unknown_redact_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown key 'pattern' in \\[redact\\]; valid keys"):
        Config.from_mapping({"redact": {"pattern": ["x"]}})


def test_patterns_survive_a_copy_and_the_effective_configuration() -> None:
    cfg = Config.from_mapping({"redact": {"patterns": ["corp-[0-9]+"]}})
    assert cfg.with_options({"on_loop": "warn"}).redact_patterns == ("corp-[0-9]+",)
    assert cfg.to_dict()["redact"] == {"patterns": ["corp-[0-9]+"]}
    assert re.compile(cfg.redact_patterns[0])


# -- what the command line prints and writes -------------------------------------------------
def _looping_runs(path: Path) -> None:
    """One run per format: the same command four times, the same result each time
    (which carries the secret too, as a tool echoing its input would)."""
    with path.open("w", encoding="utf-8") as fh:
        for n, (_, command, _) in enumerate(CASES):
            events: list[dict[str, object]] = [{"kind": "user", "text": f"please run {command}"}]
            for i in range(4):
                events += [
                    {"kind": "model", "text": f"Running {command}"},
                    {"kind": "tool_call", "name": "Bash", "args": {"command": command},
                     "id": f"c{i}"},
                    {"kind": "tool_result", "name": "Bash", "id": f"c{i}", "error": True,
                     "text": f"error: {command} failed"},
                ]  # fmt: skip
            meta = {"command": command}
            fh.write(json.dumps({"run_id": f"r{n}", "meta": meta, "events": events}) + "\n")


def _assert_shows_no_secret(where: str, text: str) -> None:
    for fmt, _, secret in CASES:
        assert secret not in text, f"{where} shows the {fmt}"


def test_scan_table_json_explain_and_report_show_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("jinja2")
    runs = tmp_path / "runs.jsonl"
    _looping_runs(runs)
    assert main(["scan", "--json", "--fail-on", "warn", str(runs)]) == 1
    out = capsys.readouterr().out
    assert "[redacted]" in out
    _assert_shows_no_secret("scan --json", out)
    assert main(["scan", str(runs)]) == 0
    _assert_shows_no_secret("the scan table", capsys.readouterr().out)
    for n in range(len(CASES)):
        assert main(["scan", str(runs), "--explain", f"r{n}"]) == 0
        _assert_shows_no_secret("--explain", capsys.readouterr().out)
    html = tmp_path / "report.html"
    assert main(["report", str(runs), "-o", str(html)]) == 0
    page = html.read_text(encoding="utf-8")
    assert "[redacted]" in page
    _assert_shows_no_secret("the HTML report", page)


def test_a_bad_pattern_in_loopwatch_toml_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "loopwatch.toml"
    conf.write_text('[redact]\npatterns = ["corp-[0-9"]\n', encoding="utf-8")
    runs = tmp_path / "runs.jsonl"
    _looping_runs(runs)
    assert main(["scan", "--config", str(conf), str(runs)]) == 2
    err = capsys.readouterr().err
    assert f"[redact] patterns[0] in {conf} is not a valid regular expression" in err
    assert "Traceback" not in err
