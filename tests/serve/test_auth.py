"""Token files and variables of ``serve/auth.py``: what opens which path, and tokens refused with the fix (the
servers' 401s: test_serve_guard.py, tests/ray/test_ray_serve_guard.py)."""

from __future__ import annotations

import pytest

from paddlex_npu import envs
from paddlex_npu.serve.auth import AccessTokens, bearer

API = "a" * 32
SCRAPER = "m" * 32


def test_tokens_from_a_file_and_the_variables(tmp_path, monkeypatch):
    (tmp_path / "api").write_text(f"# clients\n\n{API}\n  {'b' * 20}  \n")
    monkeypatch.setenv(envs.API_TOKENS.name, "c" * 16 + ", " + "d" * 16)
    monkeypatch.setenv(envs.METRICS_TOKENS.name, SCRAPER)
    tokens = AccessTokens.load(str(tmp_path / "api"))
    assert tokens.api == (API, "b" * 20, "c" * 16, "d" * 16) and tokens.metrics == (SCRAPER,)
    assert tokens.accepted("/ocr") == tokens.api and tokens.accepted("/anything") == tokens.api
    assert tokens.accepted("/metrics") == (SCRAPER, *tokens.api)
    assert tokens.accepted("/health") == () and tokens.accepted("/ready") == ()


def test_no_token_set_opens_everything(monkeypatch):
    for var in (envs.API_TOKENS, envs.METRICS_TOKENS):
        monkeypatch.delenv(var.name, raising=False)
    tokens = AccessTokens.load()
    assert not tokens.enabled and tokens.accepted("/ocr") == () and tokens.accepted("/metrics") == ()


@pytest.mark.parametrize("content, says", [("short\n", "at least 16"), ("# only a comment\n", "holds no token")])
def test_bad_token_files_are_refused_with_the_fix(tmp_path, content, says):
    (tmp_path / "t").write_text(content)
    with pytest.raises(ValueError, match=says):
        AccessTokens.load(str(tmp_path / "t"))
    with pytest.raises(ValueError, match="cannot be read"):
        AccessTokens.load(str(tmp_path / "missing"))


@pytest.mark.parametrize(
    "headers, token",
    [
        ([(b"authorization", b"Bearer " + API.encode())], API.encode()),
        ([(b"Authorization", b"bearer   " + API.encode())], API.encode()),
        ([(b"authorization", b"Basic " + API.encode())], b""),
        ([], b""),
    ],
)
def test_the_bearer_token_of_a_request(headers, token):
    assert bearer(headers) == token
