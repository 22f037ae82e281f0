"""--network: parsing, and the toxiproxy and tc settings a spec turns into (no sockets)."""

from __future__ import annotations

import pytest

from benchmarks.net.spec import Network, NetworkSpecError, format_rate, parse_network


@pytest.mark.parametrize("text", ["none", "loopback", "", " NONE "])
def test_none_is_loopback(text: str) -> None:
    assert parse_network(text) is None


@pytest.mark.parametrize(("text", "rtt", "rate"), [
    ("rtt=2ms,rate=10gbit", 2, 10_000_000_000),
    ("rate=1gbit, rtt=5ms", 5, 1_000_000_000),
    ("rtt=1ms", 1, None),
    ("rate=500mbit", 0, 500_000_000),
    ("rtt=0.002s,rate=1.5gbit", 2, 1_500_000_000),
    ("rtt=3000us", 3, None),
    ("RTT=1MS,RATE=100MBIT", 1, 100_000_000),
])
def test_parse(text: str, rtt: int, rate: int | None) -> None:
    assert parse_network(text) == Network(rtt_ms=rtt, rate_bit=rate)


@pytest.mark.parametrize(("text", "says"), [
    ("rtt=0.5ms", "whole number of milliseconds"),
    ("rtt=2", "not a duration"),
    ("rate=10gb", "not a rate"),
    ("rate=10", "not a rate"),
    ("rate=1kbit", "at least 8kbit"),
    ("delay=2ms", "expected rtt="),
    ("rtt=2ms,rtt=3ms", "given twice"),
    ("rtt", "expected rtt="),
])
def test_refused(text: str, says: str) -> None:
    with pytest.raises(NetworkSpecError, match=says):
        parse_network(text)


@pytest.mark.parametrize("text", ["rtt=2ms,rate=10gbit", "rtt=0ms", "rtt=5ms,rate=1500mbit",
                                  "rtt=1ms,rate=123456bit"])
def test_label_round_trips(text: str) -> None:
    net = parse_network(text)
    assert net is not None
    assert parse_network(net.label) == net


def test_format_rate() -> None:
    assert format_rate(10_000_000_000) == "10gbit"
    assert format_rate(1_500_000_000) == "1500mbit"
    assert format_rate(64_000) == "64kbit"
    assert format_rate(1_234) == "1234bit"


@pytest.mark.parametrize(("rtt", "up", "down"), [(0, 0, 0), (1, 0, 1), (2, 1, 1), (5, 2, 3)])
def test_the_round_trip_is_split_between_directions(rtt: int, up: int, down: int) -> None:
    net = Network(rtt_ms=rtt)
    assert net.latencies_ms() == (up, down)
    toxics = net.toxics()
    assert sum(t["attributes"]["latency"] for t in toxics) == rtt  # type: ignore[index]
    assert {t["stream"] for t in toxics} == {s for s, ms in (("upstream", up),
                                                             ("downstream", down)) if ms}
    assert all(t["type"] == "latency" and t["attributes"]["jitter"] == 0  # type: ignore[index]
               for t in toxics)


def test_tbf() -> None:
    assert Network(rtt_ms=2).tbf("eth0") is None
    command = Network(rate_bit=10_000_000_000).tbf("veth1")
    assert command is not None
    assert command[:7] == ["tc", "qdisc", "replace", "dev", "veth1", "root", "tbf"]
    assert command[command.index("rate") + 1] == "10000000000bit"
    assert int(command[command.index("burst") + 1]) == 10_000_000_000 // 8 * 4 // 1000
    slow = Network(rate_bit=1_000_000).tbf("veth1")
    assert slow is not None and int(slow[slow.index("burst") + 1]) == 64 * 1024


def test_public_ports_of_a_cluster_map() -> None:
    from benchmarks.net.netns import public_ports

    def node(port: str) -> dict[str, object]:
        return {"public_net": {"node_ip_addr": "127.0.0.1", "daemon_port": port},
                "intra_control_net": {"daemon_port": "1"}}

    smap = {"pmap": {"p1": node("51080")},
            "tmap": {"t1": node("51081"), "t2": node("51082")}}
    assert public_ports(smap) == [51080, 51081, 51082]
    assert public_ports({"pmap": {"p1": node("9")}, "tmap": None}) == [9]


def test_sweep_and_repeats() -> None:
    from benchmarks.net.spec import SWEEP, parse_networks

    sweep = parse_networks(["sweep"])
    assert sweep == [parse_network(text) for text in SWEEP]
    assert sweep[0] is None and len(sweep) == 4
    assert parse_networks(["none", "sweep", "rtt=2ms"]) == [*sweep, Network(rtt_ms=2)]
    assert parse_networks(["rtt=1ms,rate=10gbit", "rate=10gbit,rtt=1ms"]) == [
        Network(1, 10_000_000_000)]
    with pytest.raises(NetworkSpecError):
        parse_networks(["none", "rtt=fast"])
