"""Agent identifiers and proxy strategies, with apiserver-network-proxy's exact matching. No I/O.

- `agentidentifiers` is a URL query string (`host=a&ipv4=1.2.3.4&default-route=true`); `&` is
  the only separator and `;` is an error, as in Go's `url.ParseQuery`.
- `destHost` compares the dial address without its port (`remove_port_from_host`) to every
  `host=`, `ipv4=` and `ipv6=` identifier: exact, case-sensitive, no DNS, no CIDR.
- `default` picks a random agent; `defaultRoute` a random agent that sent `default-route=true`.
- Non-draining agents win; when all candidates are draining the first draining one is used.
- Strategies are tried in order; only "No agent available" moves on to the next one.
"""

from __future__ import annotations

import random as _random
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

NO_AGENT = "No agent available"
STRATEGIES = ("default", "destHost", "defaultRoute")
IDENTIFIER_KEYS = ("host", "ipv4", "ipv6", "cidr", "default-route")
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class IdentifierError(ValueError):
    pass


@dataclass(frozen=True)
class AgentIdentifiers:
    hosts: tuple[str, ...] = ()  # host=, ipv4= and ipv6= values, in order (one destHost map)
    cidrs: tuple[str, ...] = ()  # parsed, used by no strategy (as in ANP)
    default_route: bool = False
    by_key: tuple[tuple[str, str], ...] = ()

    def names(self) -> set[str]:
        return set(self.hosts)


def parse_identifiers(text: str, *, strict: bool = False) -> AgentIdentifiers:
    """Parse `agentidentifiers`. `strict` (the agent's own validation) rejects unknown keys; the
    server ignores them ("fail open")."""
    if ";" in text:
        raise IdentifierError("invalid semicolon separator in query")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=False, separator="&")
    except ValueError as exc:
        raise IdentifierError(str(exc)) from exc
    hosts: list[str] = []
    cidrs: list[str] = []
    default_route: bool | None = None
    kept: list[tuple[str, str]] = []
    for key, value in pairs:
        if key in ("host", "ipv4", "ipv6"):
            hosts.append(value)
        elif key == "cidr":
            cidrs.append(value)
        elif key == "default-route":
            if default_route is None:  # strconv.ParseBool on the first value
                if value in _TRUE:
                    default_route = True
                elif value in _FALSE:
                    default_route = False
                else:
                    raise IdentifierError(f"invalid default-route value {value!r}")
        elif strict:
            raise IdentifierError(f"unknown agent identifier key {key!r}")
        else:
            continue
        kept.append((key, value))
    return AgentIdentifiers(tuple(hosts), tuple(cidrs), bool(default_route), tuple(kept))


def remove_port_from_host(address: str) -> str:
    """ANP's `util.RemovePortFromHost`, byte for byte."""
    if address.count(":") <= 1:
        return address.split(":", 1)[0]
    if "[" in address:
        address = address[:address.rfind(":")]
    return address.strip("[]")


def parse_strategies(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    if not names:
        raise ValueError("proxy strategies cannot be empty")
    for name in names:
        if name not in STRATEGIES:
            raise ValueError(f"unknown proxy strategy: {name}")
    return names


@dataclass
class _Agent:
    agent_id: str
    identifiers: AgentIdentifiers
    draining: bool = False


@dataclass
class Router:
    """Which agent stream (a `backend` id) serves a dial address."""

    strategies: tuple[str, ...] = ("default",)
    rng: _random.Random = field(default_factory=_random.Random)
    _agents: dict[int, _Agent] = field(default_factory=dict)
    _by_agent_id: dict[str, list[int]] = field(default_factory=dict)  # insertion-ordered ids
    _by_host: dict[str, list[int]] = field(default_factory=dict)

    def add(self, backend: int, agent_id: str, identifiers: AgentIdentifiers) -> None:
        self._agents[backend] = _Agent(agent_id, identifiers)
        self._by_agent_id.setdefault(agent_id, []).append(backend)
        for host in dict.fromkeys(identifiers.hosts):
            self._by_host.setdefault(host, []).append(backend)

    def remove(self, backend: int) -> None:
        agent = self._agents.pop(backend, None)
        if agent is None:
            return
        _discard(self._by_agent_id, agent.agent_id, backend)
        for host in dict.fromkeys(agent.identifiers.hosts):
            _discard(self._by_host, host, backend)

    def set_draining(self, backend: int) -> None:
        if backend in self._agents:
            self._agents[backend].draining = True

    def is_draining(self, backend: int) -> bool:
        return backend in self._agents and self._agents[backend].draining

    def choose(self, address: str) -> int | None:
        for strategy in self.strategies:
            found = self._choose(strategy, address)
            if found is not None:
                return found
        return None

    def ready(self) -> bool:
        """Readiness follows the first strategy, as in ANP."""
        first = self.strategies[0]
        if first == "destHost":
            return bool(self._by_host)
        if first == "defaultRoute":
            return any(a.identifiers.default_route for a in self._agents.values())
        return bool(self._by_agent_id)

    def count(self, strategy: str) -> int:
        if strategy == "destHost":
            return len({b for bs in self._by_host.values() for b in bs})
        if strategy == "defaultRoute":
            return sum(1 for a in self._agents.values() if a.identifiers.default_route)
        return len(self._agents)

    def _choose(self, strategy: str, address: str) -> int | None:
        if strategy == "destHost":
            return self._first_ready(self._by_host.get(remove_port_from_host(address), []))
        ids = list(self._by_agent_id)
        if strategy == "defaultRoute":
            ids = [i for i in ids if self._agents[self._by_agent_id[i][0]].identifiers.default_route]
        if not ids:
            return None
        start = self.rng.randrange(len(ids))
        firsts = [self._by_agent_id[ids[(start + k) % len(ids)]][0] for k in range(len(ids))]
        return self._first_ready(firsts)

    def _first_ready(self, candidates: Iterable[int]) -> int | None:
        fallback: int | None = None
        for backend in candidates:
            if not self._agents[backend].draining:
                return backend
            if fallback is None:
                fallback = backend
        return fallback


def _discard(index: dict[str, list[int]], key: str, backend: int) -> None:
    entries = index.get(key)
    if entries and backend in entries:
        entries.remove(backend)
        if not entries:
            del index[key]
