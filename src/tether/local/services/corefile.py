"""The Corefile of `kube-system/coredns`, read as CoreDNS reads it (pure: parse, then compile).

Syntax (Caddyfile): a server block is keys (`zone[:port]`, several separated by spaces or
commas, `dns://` allowed) and a `{ ... }` body; each body line is a plugin with arguments, and a
trailing `{` opens the plugin's own block (closed by a line `}`); `#` starts a comment; double
quotes group words.

What the embedded DNS does with each plugin:

| plugin | here |
|---|---|
| `kubernetes [ZONES]` | answers the cluster's zone from Services and EndpointSlices; `ttl`, `fallthrough [ZONES]` (NXDOMAIN goes on to the next plugin), `pods`, `endpoint_pod_names` are honoured |
| `rewrite [continue\\|stop] name [exact\\|prefix\\|suffix\\|substring\\|regex] FROM TO` | rewrites the question's name before `kubernetes`/`forward`; `answer name FROM TO` rewrites answer owner names back; the block form holds several rules; the question comes back as asked |
| `forward FROM TO...` | sends names under FROM to TO (`IP[:PORT]`, `dns://IP[:PORT]`, or a resolv.conf path); options are accepted |
| `cache [TTL]` | caches forwarded answers for at most TTL seconds (and answers from the cluster until it changes) |
| `errors`, `log` | errors, and with `log` every query, go to the DNS pod's log |
| `loadbalance` | shuffles A/AAAA answers round-robin |
| `health`, `ready`, `prometheus`, `loop`, `reload`, `bufsize`, `debug`, `cancel`, `any`, `nsid`, `whoami` | accepted; nothing to do here (edits apply without restart anyway) |
| anything else | ignored, with a Warning Event on the ConfigMap naming the plugin |

A server block serves the queries whose name is under one of its zones, the longest zone
winning, as CoreDNS does; the port in a key is ignored (the cluster DNS has one address).
Plugins run in CoreDNS's own order (cache, rewrite, kubernetes, forward), whatever the order
they are written in.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

NOOP_PLUGINS = frozenset({"health", "ready", "prometheus", "loop", "reload", "bufsize", "debug", "cancel", "any",
                          "nsid", "whoami", "metadata", "timeouts"})
KNOWN_KUBERNETES_OPTIONS = frozenset({"pods", "endpoint_pod_names", "fallthrough", "ttl", "upstream", "namespaces",
                                      "labels", "namespace_labels", "kubeconfig", "endpoint", "tls", "noendpoints",
                                      "ignore", "multicluster", "startup_timeout", "apiserver_qps", "apiserver_burst",
                                      "apiserver_max_inflight"})
REWRITE_KINDS = ("exact", "prefix", "suffix", "substring", "regex")
DEFAULT_TTL = 5


class CorefileError(ValueError):
    """A Corefile that cannot be read (the message names the line)."""


@dataclass(frozen=True)
class Directive:
    name: str
    args: tuple[str, ...]
    line: int
    block: tuple[Directive, ...] = ()


@dataclass(frozen=True)
class ServerBlock:
    keys: tuple[str, ...]
    directives: tuple[Directive, ...]
    line: int


def _tokenize(text: str) -> list[tuple[int, list[str]]]:
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        lexer = shlex.shlex(raw, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        lexer.quotes = '"'
        lexer.escape = ""  # backslashes are regex escapes, kept as written
        try:
            tokens = list(lexer)
        except ValueError as exc:
            raise CorefileError(f"line {number}: {exc}") from None
        split: list[str] = []
        for token in tokens:  # `{` or `}` glued to a word: `zone{`
            if token.endswith("{") and token != "{" and not re.search(r"\{\d+\}$", token):
                split += [token[:-1], "{"]
            else:
                split.append(token)
        if split:
            lines.append((number, split))
    return lines


def parse(text: str) -> list[ServerBlock]:
    lines = _tokenize(text)
    at = 0

    def body(start: int) -> tuple[tuple[Directive, ...], int]:
        nonlocal at
        found: list[Directive] = []
        while at < len(lines):
            number, tokens = lines[at]
            at += 1
            if tokens == ["}"]:
                return tuple(found), number
            if tokens[-1] == "{":
                inner, _ = body(number)
                found.append(Directive(tokens[0], tuple(tokens[1:-1]), number, inner))
            elif "}" in tokens or "{" in tokens:
                raise CorefileError(f"line {number}: unexpected brace in {' '.join(tokens)!r}")
            else:
                found.append(Directive(tokens[0], tuple(tokens[1:]), number))
        raise CorefileError(f"line {start}: block opened here is never closed")

    blocks: list[ServerBlock] = []
    while at < len(lines):
        number, tokens = lines[at]
        at += 1
        if tokens[-1] != "{":
            raise CorefileError(f"line {number}: expected server block keys followed by '{{', got "
                                f"{' '.join(tokens)!r}")
        keys = tuple(k for token in tokens[:-1] for k in token.split(",") if k)
        if not keys:
            raise CorefileError(f"line {number}: a server block needs at least one zone")
        directives, _ = body(number)
        blocks.append(ServerBlock(keys, directives, number))
    return blocks


# compiled -------------------------------------------------------------------------------------


def normalize_zone(key: str) -> str:
    """`dns://cluster.aws.:53` -> `cluster.aws`; `.` -> `` (the root)."""
    value = key.strip()
    for scheme in ("dns://", "tls://", "grpc://", "https://"):
        if value.startswith(scheme):
            value = value[len(scheme):]
    if value.startswith("[") or value.count(":") > 1:
        return value.lower()
    value = value.split(":", 1)[0]
    return value.strip(".").lower()


def in_zone(name: str, zone: str) -> bool:
    return zone == "" or name == zone or name.endswith("." + zone)


@dataclass(frozen=True)
class RewriteRule:
    kind: str
    pattern: str
    replacement: str
    answer_pattern: str | None = None
    answer_replacement: str = ""
    stop: bool = False

    def rewrite(self, name: str) -> str | None:
        """The new name (no trailing dot), or None when the rule does not match `name`."""
        fqdn = name.rstrip(".") + "."
        if self.kind == "exact":
            return self.replacement.rstrip(".") if fqdn == self.pattern.rstrip(".") + "." else None
        if self.kind == "prefix":
            return (self.replacement + fqdn[len(self.pattern):]).rstrip(".") if fqdn.startswith(self.pattern) \
                else None
        if self.kind == "suffix":
            pattern = self.pattern if self.pattern.endswith(".") else self.pattern + "."
            if not fqdn.endswith(pattern):
                return None
            replacement = self.replacement if self.replacement.endswith(".") else self.replacement + "."
            return (fqdn[: -len(pattern)] + replacement).rstrip(".")
        if self.kind == "substring":
            return fqdn.replace(self.pattern, self.replacement, 1).rstrip(".") if self.pattern in fqdn else None
        found = re.search(self.pattern, fqdn)
        if found is None:
            return None
        return _substitute(self.replacement, found).rstrip(".")

    def revert(self, name: str) -> str | None:
        if self.answer_pattern is None:
            return None
        found = re.search(self.answer_pattern, name.rstrip(".") + ".")
        return _substitute(self.answer_replacement, found).rstrip(".") if found else None


def _substitute(template: str, found: re.Match[str]) -> str:
    def group(m: re.Match[str]) -> str:
        index = int(m.group(1))
        if index > (found.re.groups or 0):
            return m.group(0)
        return found.group(index) or ""
    return re.sub(r"\{(\d+)\}", group, template)


@dataclass(frozen=True)
class Kubernetes:
    zones: tuple[str, ...]
    ttl: int = DEFAULT_TTL
    fallthrough: tuple[str, ...] | None = None  # None: never; (): every zone
    endpoint_pod_names: bool = False
    pods: str = "disabled"

    def falls_through(self, name: str) -> bool:
        if self.fallthrough is None:
            return False
        return not self.fallthrough or any(in_zone(name, z) for z in self.fallthrough)


@dataclass(frozen=True)
class Forward:
    zone: str
    targets: tuple[str, ...]  # IP[:port], dns://..., or a resolv.conf path


@dataclass(frozen=True)
class Block:
    zones: tuple[str, ...]
    line: int
    rewrites: tuple[RewriteRule, ...] = ()
    kubernetes: Kubernetes | None = None
    forward: Forward | None = None
    cache_ttl: int | None = None
    log: bool = False
    errors: bool = False
    loadbalance: bool = False


@dataclass(frozen=True)
class Config:
    blocks: tuple[Block, ...]
    warnings: tuple[str, ...] = ()

    def select(self, name: str) -> Block | None:
        """The block serving `name`: the one with the longest zone `name` is under."""
        best: tuple[int, Block] | None = None
        for block in self.blocks:
            for zone in block.zones:
                if in_zone(name, zone) and (best is None or len(zone) > best[0]):
                    best = (len(zone), block)
        return best[1] if best else None


def default_corefile(domain: str = "cluster.local") -> str:
    """The Corefile kubeadm writes into `kube-system/coredns`."""
    return (".:53 {\n"
            "    errors\n"
            "    health {\n"
            "       lameduck 5s\n"
            "    }\n"
            "    ready\n"
            f"    kubernetes {domain} in-addr.arpa ip6.arpa {{\n"
            "       pods insecure\n"
            "       fallthrough in-addr.arpa ip6.arpa\n"
            "       ttl 30\n"
            "    }\n"
            "    prometheus :9153\n"
            "    forward . /etc/resolv.conf {\n"
            "       max_concurrent 1000\n"
            "    }\n"
            "    cache 30 {\n"
            f"       disable success {domain}\n"
            f"       disable denial {domain}\n"
            "    }\n"
            "    loop\n"
            "    reload\n"
            "    loadbalance\n"
            "}\n")


def _rewrite_rules(directive: Directive, warnings: list[str]) -> list[RewriteRule]:
    args = list(directive.args)
    stop = True
    if args and args[0] in ("continue", "stop"):
        stop = args.pop(0) == "stop"
    lines: list[list[str]] = [[d.name, *d.args] for d in directive.block]
    if args:
        lines.insert(0, args)
    rules: list[RewriteRule] = []
    pending: RewriteRule | None = None
    for words in lines:
        if not words:
            continue
        if words[0] == "answer" and len(words) >= 2:
            if words[1] == "name" and len(words) >= 4 and pending is not None:
                pattern, replacement = (words[3], words[4]) if words[2] == "regex" and len(words) >= 5 \
                    else (words[2], words[3])
                pending = RewriteRule(pending.kind, pending.pattern, pending.replacement, pattern, replacement, stop)
                rules[-1] = pending
            elif words[1] != "auto":
                warnings.append(f"line {directive.line}: rewrite answer {words[1]} is not supported; ignored")
            continue
        if words[0] != "name":
            warnings.append(f"line {directive.line}: rewrite {words[0]} is not supported (only name); ignored")
            continue
        rest = words[1:]
        kind = "exact"
        if rest and rest[0] in REWRITE_KINDS:
            kind = rest.pop(0)
        if len(rest) < 2:
            warnings.append(f"line {directive.line}: rewrite name needs FROM and TO")
            continue
        if kind == "regex":
            try:
                re.compile(rest[0])
            except re.error as exc:
                warnings.append(f"line {directive.line}: rewrite regex {rest[0]!r}: {exc}")
                continue
        pending = RewriteRule(kind, rest[0].lower() if kind != "regex" else rest[0], rest[1], stop=stop)
        rules.append(pending)
        tail = rest[2:]
        if len(tail) >= 4 and tail[0] == "answer" and tail[1] == "name":
            pattern, replacement = (tail[3], tail[4]) if tail[2] == "regex" and len(tail) >= 5 else (tail[2], tail[3])
            rules[-1] = RewriteRule(kind, pending.pattern, pending.replacement, pattern, replacement, stop)
    return rules


def _kubernetes(directive: Directive, zones: tuple[str, ...], warnings: list[str]) -> Kubernetes:
    own = tuple(normalize_zone(z) for z in directive.args) or zones
    ttl, fallthrough, pod_names, pods = DEFAULT_TTL, None, False, "disabled"
    for option in directive.block:
        if option.name == "ttl" and option.args:
            try:
                ttl = max(0, min(3600, int(option.args[0])))
            except ValueError:
                warnings.append(f"line {option.line}: kubernetes ttl {option.args[0]!r} is not a number")
        elif option.name == "fallthrough":
            fallthrough = tuple(normalize_zone(z) for z in option.args)
        elif option.name == "endpoint_pod_names":
            pod_names = True
        elif option.name == "pods" and option.args:
            pods = option.args[0]
        elif option.name not in KNOWN_KUBERNETES_OPTIONS:
            warnings.append(f"line {option.line}: kubernetes option {option.name} is not known; ignored")
    return Kubernetes(own, ttl, fallthrough, pod_names, pods)


def compile_corefile(text: str) -> Config:
    """The blocks and what was ignored; `CorefileError` when the text cannot be parsed."""
    warnings: list[str] = []
    blocks: list[Block] = []
    for server in parse(text):
        zones = tuple(normalize_zone(k) for k in server.keys)
        rewrites: list[RewriteRule] = []
        kubernetes: Kubernetes | None = None
        forward: Forward | None = None
        cache_ttl: int | None = None
        flags = {"log": False, "errors": False, "loadbalance": False}
        for d in server.directives:
            if d.name == "rewrite":
                rewrites += _rewrite_rules(d, warnings)
            elif d.name == "kubernetes":
                kubernetes = _kubernetes(d, zones, warnings)
            elif d.name == "forward":
                if len(d.args) < 2:
                    warnings.append(f"line {d.line}: forward needs FROM and at least one TO")
                    continue
                forward = Forward(normalize_zone(d.args[0]), d.args[1:])
            elif d.name == "cache":
                try:
                    cache_ttl = int(d.args[0]) if d.args else 3600
                except ValueError:
                    cache_ttl = 3600
            elif d.name in flags:
                flags[d.name] = True
            elif d.name in NOOP_PLUGINS:
                continue
            else:
                warnings.append(f"line {d.line}: plugin {d.name} is not supported by the local cluster DNS; "
                                f"ignored (server block {' '.join(server.keys)})")
        blocks.append(Block(zones, server.line, tuple(rewrites), kubernetes, forward, cache_ttl, flags["log"],
                            flags["errors"], flags["loadbalance"]))
    return Config(tuple(blocks), tuple(warnings))


@dataclass
class Rewritten:
    """A question name after the rewrite rules, and how to turn answers back."""

    original: str
    name: str
    rules: list[RewriteRule] = field(default_factory=list)  # the rules that matched

    def revert(self, owner: str) -> str:
        for rule in self.rules:
            back = rule.revert(owner)
            if back is not None:
                return back
        return owner


def apply_rewrites(rules: Iterable[RewriteRule], name: str) -> Rewritten:
    result = Rewritten(name, name)
    for rule in rules:
        new = rule.rewrite(result.name)
        if new is None:
            continue
        result.name = new
        result.rules.append(rule)
        if rule.stop:
            break
    return result
