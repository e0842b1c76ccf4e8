"""Where the live page is served: ``Plotter(http=..., http_token=...)`` is checked in the trainer."""
import pickle
import socket

import pytest

from async_plotter import InvalidArgumentError, Plotter
from async_plotter.web.address import TOKEN_ENV, HttpConfig, parse_http_address
from tests.policies import LinearPolicy


@pytest.fixture(autouse=True)
def no_token_in_environment(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)


@pytest.mark.parametrize("given, host, port", [
    (8080, "127.0.0.1", 8080),
    (0, "127.0.0.1", 0),
    ("8080", "127.0.0.1", 8080),
    ("127.0.0.1:8080", "127.0.0.1", 8080),
    ("localhost:9000", "localhost", 9000),
    ("[::1]:8080", "::1", 8080),
    ("127.0.0.2:1", "127.0.0.2", 1),
])
def test_loopback_addresses_need_no_token(given, host, port):
    config = parse_http_address(given, None)
    assert (config.host, config.port, config.token) == (host, port, None)
    assert config.loopback


@pytest.mark.parametrize("given, message", [
    (8080.0, "must be a port number"),
    (True, "must be a port number"),
    (None, "must be a port number"),
    ([8080], "must be a port number"),
    (-1, "out of range"),
    (65536, "out of range"),
    ("127.0.0.1:70000", "out of range"),
    ("http://127.0.0.1:8080", "not 'host:port'"),
    ("127.0.0.1", "not 'host:port'"),
    (":8080", "no host"),
    ("127.0.0.1:port", "not a number"),
    ("::1:8080", "not 'host:port'"),
    ("[::1]8080", "IPv6"),
])
def test_malformed_addresses_are_named(given, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_http_address(given, None)


@pytest.mark.parametrize("host", ["0.0.0.0:8080", "192.168.1.10:8080", "myhost:8080", "[::]:80"])
def test_other_addresses_require_a_token(host):
    with pytest.raises(InvalidArgumentError, match="needs a token.*ssh -L 8080:127.0.0.1:8080"):
        parse_http_address(host, None)
    config = parse_http_address(host, "s3cret-token")
    assert config.token == "s3cret-token" and not config.loopback


def test_token_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert parse_http_address("0.0.0.0:8080", None).token == "from-env"
    assert parse_http_address("0.0.0.0:8080", "explicit").token == "explicit"
    monkeypatch.setenv(TOKEN_ENV, "")
    with pytest.raises(InvalidArgumentError, match="needs a token"):
        parse_http_address("0.0.0.0:8080", None)


@pytest.mark.parametrize("token, message", [("", "non-empty"), (" padded ", "whitespace"),
                                            (1234, "must be a string")])
def test_bad_tokens_are_refused(token, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse_http_address("0.0.0.0:8080", token)


def test_config_pickles_and_hides_its_token():
    config = parse_http_address("0.0.0.0:8080", "do-not-log-me")
    assert pickle.loads(pickle.dumps(config)) == config
    assert "do-not-log-me" not in repr(config)
    assert isinstance(config, HttpConfig)


def test_plotter_checks_http_before_starting_anything():
    with pytest.raises(InvalidArgumentError, match="needs a token"):
        Plotter("Swimmer-v5", LinearPolicy(8, 2), http="0.0.0.0:8080", window=False)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        Plotter("Swimmer-v5", LinearPolicy(8, 2), http=99999, window=False)


def test_a_port_another_program_serves_is_refused_in_plotter_before_anything_starts(tmp_path):
    """Before, the render process failed to bind it at start(), was restarted three times and
    plotting was turned off: the videos of the run were lost with the page."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(InvalidArgumentError) as refused:
            Plotter("Swimmer-v5", LinearPolicy(8, 2), http=port, video_dir=str(tmp_path / "v"))
        message = str(refused.value)
        assert message.startswith(f"http={port}: cannot serve the live page on 127.0.0.1:{port}")
        assert "http=0 for a free one" in message and "Plotter.close_all()" in message
        assert not (tmp_path / "v").exists()
    finally:
        taken.close()
    # Once it is free, the same port is served.
    plotter = Plotter("Swimmer-v5", LinearPolicy(8, 2), http=port, video_dir=str(tmp_path / "v"))
    plotter.close()


def test_http_true_serves_on_a_free_port_and_false_serves_none():
    with Plotter("Swimmer-v5", LinearPolicy(8, 2), http=True, window=False, verbose=0) as plotter:
        url = plotter.wait_for_http_url(timeout=60)
    assert url is not None and url.startswith("http://127.0.0.1:") and not url.endswith(":0/")
    plotter = Plotter("Swimmer-v5", LinearPolicy(8, 2), http=False, video_dir=None, window=False)
    assert not plotter._config.has_output
    plotter.close()
