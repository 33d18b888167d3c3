"""Linguistic expressions over terms: expr := term | expr OR term; term := mod | term AND mod;
mod := HEDGE mod | TERM | ( expr ). OR is max, AND is min, case-insensitive; lexer shared with PERFQL.
Bounded: at most MAX_LENGTH characters, MAX_TOKENS tokens and MAX_DEPTH nested parentheses, hedges or
signs, so parsing and the recursive evaluation never exhaust the stack."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from causewatch.analytics.fuzzy import hedges
from causewatch.analytics.fuzzy.membership import Membership

_TOKEN = re.compile(r"""\s*(?:(?P<number>\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)
                        |(?P<name>[A-Za-z_][A-Za-z0-9_]*)|"(?P<quoted>[^"]*)"|(?P<op>[()+\-*/]))""", re.X)
MAX_LENGTH = 4000   # characters of one expression
MAX_TOKENS = 300    # names, numbers, keywords and operators: an AND/OR chain nests one level per operand
MAX_DEPTH = 50      # parentheses, hedges and unary signs inside each other


class ExpressionError(ValueError):
    """A malformed or unresolvable expression: names the 1-based column and what was expected there."""

    def __init__(self, text: str, column: int, expected: str, found: str):
        self.text, self.column, self.expected, self.found = text, column, expected, found
        super().__init__(f"column {column}: expected {expected}, found {found}\n  {text}\n  {' ' * (column - 1)}^")


@dataclass(frozen=True)
class Token:
    kind: str      # 'number', 'name', 'quoted', 'op' or 'end'
    text: str
    column: int    # 1-based

    def describe(self) -> str:
        return "end of input" if self.kind == "end" else repr(self.text)

    def keyword(self) -> str | None:
        """The lower-cased word if this is an unquoted name (keywords are never quoted)."""
        return self.text.lower() if self.kind == "name" else None


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_LENGTH:
        raise ExpressionError(text[:40] + "...", MAX_LENGTH + 1,
                              f"at most {MAX_LENGTH} characters (the length limit)", f"{len(text)} characters")
    tokens, pos = [], 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            col = pos + len(text[pos:]) - len(text[pos:].lstrip()) + 1
            raise ExpressionError(text, col, "a name, a number, an operator or a parenthesis",
                                  repr(text[col - 1]))
        kind = m.lastgroup
        tokens.append(Token(kind, m.group(kind), m.start(kind) + 1 - (kind == "quoted")))
        if len(tokens) > MAX_TOKENS:
            raise ExpressionError(text, tokens[-1].column, f"at most {MAX_TOKENS} tokens (the length limit)",
                                  "more")
        pos = m.end()
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


class TokenStream:
    """Tokens with one-token look-ahead; `fail` raises an ExpressionError at the current token."""

    def __init__(self, text: str):
        self.text, self.tokens, self.i = text, tokenize(text), 0
        self.depth = 0

    def nest(self, rule: Callable[["TokenStream"], tuple]) -> tuple:
        """Parse `rule` one level deeper; past MAX_DEPTH, an ExpressionError names the limit."""
        if self.depth >= MAX_DEPTH:
            self.fail(f"at most {MAX_DEPTH} nested parentheses, hedges or signs (the depth limit)")
        self.depth += 1
        try:
            return rule(self)
        finally:
            self.depth -= 1

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def fail(self, expected: str, tok: Token | None = None):
        tok = tok or self.peek()
        raise ExpressionError(self.text, tok.column, expected, tok.describe())

    def accept_keyword(self, word: str) -> bool:
        if self.peek().keyword() == word:
            self.i += 1
            return True
        return False

    def expect_op(self, op: str, expected: str | None = None) -> Token:
        if self.peek().kind == "op" and self.peek().text == op:
            return self.next()
        self.fail(expected or repr(op))

    def parenthesised(self, rule: Callable[["TokenStream"], tuple], expected: str) -> tuple:
        """At '(': skip it, parse `rule`, then require ')' (`expected` names what else could follow)."""
        self.next()
        node = self.nest(rule)
        self.expect_op(")", expected)
        return node

    def expect_end(self, expected: str) -> None:
        if self.peek().kind != "end":
            self.fail(expected)


# AST: ("term", name, column) | ("hedge", name, node) | ("and", l, r) | ("or", l, r)

def chain(ts: TokenStream, keyword: str, operand: Callable[[TokenStream], tuple]):
    """operand (keyword operand)*, folded to the left: a OR b OR c = ("or", ("or", a, b), c)."""
    node = operand(ts)
    while ts.accept_keyword(keyword):
        node = (keyword, node, operand(ts))
    return node


def parse_expr(ts: TokenStream):
    return chain(ts, "or", parse_term)


def parse_term(ts: TokenStream):
    return chain(ts, "and", parse_mod)


def parse_mod(ts: TokenStream):
    tok = ts.peek()
    word = tok.keyword()
    if word in hedges.HEDGES:
        ts.next()
        return ("hedge", word, ts.nest(parse_mod))
    if word in ("and", "or", "is"):
        ts.fail("a term, a hedge or '('")
    if tok.kind in ("name", "quoted"):
        ts.next()
        return ("term", tok.text.lower(), tok.column)
    if tok.kind == "op" and tok.text == "(":
        return ts.parenthesised(parse_expr, "')' or AND/OR")
    ts.fail("a term, a hedge or '('")


def parse_whole(text: str, rule: Callable[[TokenStream], tuple], expected: str):
    """Apply a grammar rule to all of `text`; `expected` says what may follow a complete rule."""
    ts = TokenStream(text)
    node = rule(ts)
    ts.expect_end(expected)
    return node


def parse(text: str):
    """Parse a whole linguistic expression such as 'very low or medium'."""
    return parse_whole(text, parse_expr, "AND, OR or end of input")


def fuzzy_set(node, resolve: Callable[[str, int], Membership], mode: str):
    """Compile an expression to one set of the mode's algebra; `resolve(name, column)` finds terms."""
    kind = node[0]
    if kind == "term":
        return resolve(node[1], node[2]).as_set(mode)
    if kind == "hedge":
        return hedges.apply(node[1], fuzzy_set(node[2], resolve, mode))
    left, right = fuzzy_set(node[1], resolve, mode), fuzzy_set(node[2], resolve, mode)
    return left.and_(right) if kind == "and" else left.or_(right)


def degrees(text: str, values, terms: Mapping[str, Membership], mode: str = "compatible") -> np.ndarray:
    """Membership of `values` in the linguistic expression `text` over the term set `terms`."""
    lowered = {k.lower(): v for k, v in terms.items()}

    def resolve(name: str, column: int) -> Membership:
        if name not in lowered:
            raise ExpressionError(text, column, f"a term of {', '.join(sorted(lowered)) or '(no terms)'}",
                                  repr(name))
        return lowered[name]

    return np.nan_to_num(fuzzy_set(parse(text), resolve, mode)(values), nan=0.0)
