"""Filters as text: a small SQL-like language parsed into a pyarrow compute expression, taken
wherever a filter is (``Table.scan``, ``Table.stream``, ``Table.changes``, the CLI's ``--where``).

Grammar (keywords in any case)::

    expr       := and_expr (OR and_expr)*
    and_expr   := not_expr (AND not_expr)*
    not_expr   := NOT not_expr | predicate
    predicate  := '(' expr ')'
                | operand (('=' | '==' | '!=' | '<>' | '<' | '<=' | '>' | '>=') operand
                           | IS [NOT] NULL | [NOT] IN '(' literal (',' literal)* ')'
                           | [NOT] BETWEEN operand AND operand | [NOT] LIKE 'pattern')?
    operand    := column | literal
    literal    := 'text' | number | TRUE | FALSE | NULL

A column is a bare name (letters, digits, ``_``, ``.``, ``$``) or a ``"quoted name"``; text
literals use single quotes (``''`` for a quote inside). A literal compared with a column takes
the column's type (``d >= '2024-01-01'`` compares dates), so a value the type cannot hold is an
error naming the column, not a silent mismatch. A bare column of type bool is a predicate.

``x BETWEEN a AND b`` is ``x >= a AND x <= b`` (bounds inclusive, as SQL's).

A number compared with an integer or decimal column compares exactly, as SQL's numeric types
do, even where the column's type cannot hold it: ``n > 1.5`` on an integer column is ``n >= 2``,
``n = 1.5`` holds for no row, ``tiny < 1000`` on a TINYINT holds for every row but NULLs, and
``price = 1.005`` on a DECIMAL(10, 2) for none.

NULL follows SQL's three-valued logic: a comparison, IN or LIKE with a NULL operand is unknown,
NOT of unknown is unknown, AND and OR are Kleene's, and only rows where the whole filter is true
are kept (``v NOT IN (1, 2)`` drops rows where ``v`` is NULL, as does ``NOT v IN (1, 2)``).
"""

from __future__ import annotations

import decimal
import enum
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from changelake.errors import FilterError, ScanError


def _error(message: str, *, text: str, position: int) -> FilterError:
    near = text[position:position + 20] or "the end"
    return FilterError(f"{message} at character {position + 1} (near {near!r})", position=position)


class _Kind(enum.Enum):
    NAME = "name"
    QUOTED_NAME = "quoted name"
    STRING = "string"
    NUMBER = "number"
    OPERATOR = "operator"
    PUNCT = "punctuation"
    END = "end"


@dataclass(frozen=True)
class _Token:
    kind: _Kind
    text: str
    position: int


_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>"(?:[^"]|"")*")
  | (?P<name>[A-Za-z_$][\w.$]*)
  | (?P<operator>==|!=|<>|<=|>=|=|<|>)
  | (?P<punct>[(),])
""", re.VERBOSE)
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "LIKE", "BETWEEN", "NULL", "TRUE", "FALSE"}
_COMPARISONS = {
    "=": pc.equal, "==": pc.equal, "!=": pc.not_equal, "<>": pc.not_equal,
    "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal,
}


def _tokens(text: str) -> list[_Token]:
    found: list[_Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise _error(f"unexpected character {text[position]!r}", text=text, position=position)
        kind = match.lastgroup
        if kind == "number":
            # "a-1" is not an expression here: a sign starts a number only where a value may
            # start (first, or after an operator, a parenthesis, a comma or a keyword).
            previous = found[-1] if found else None
            after_value = previous is not None and (
                previous.kind in (_Kind.QUOTED_NAME, _Kind.STRING, _Kind.NUMBER)
                or (previous.kind is _Kind.NAME and previous.text.upper() not in _KEYWORDS)
                or (previous.kind is _Kind.PUNCT and previous.text == ")"))
            if match.group()[0] in "+-" and after_value:
                raise _error("arithmetic is not supported", text=text, position=position)
            found.append(_Token(_Kind.NUMBER, match.group(), position))
        elif kind == "string":
            found.append(_Token(_Kind.STRING, match.group()[1:-1].replace("''", "'"), position))
        elif kind == "quoted":
            found.append(_Token(_Kind.QUOTED_NAME, match.group()[1:-1].replace('""', '"'), position))
        elif kind == "name":
            found.append(_Token(_Kind.NAME, match.group(), position))
        elif kind == "operator":
            found.append(_Token(_Kind.OPERATOR, match.group(), position))
        elif kind == "punct":
            found.append(_Token(_Kind.PUNCT, match.group(), position))
        position = match.end()
    found.append(_Token(_Kind.END, "", len(text)))
    return found


@dataclass(frozen=True)
class _Column:
    name: str
    type: pa.DataType


@dataclass(frozen=True)
class _Literal:
    value: object  # None, bool, int, float or str, as written
    position: int


_Operand = _Column | _Literal


class _Parser:
    """Recursive descent over the tokens, one method per grammar rule."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema
        self.tokens = _tokens(text)
        self.index = 0

    # -- tokens -----------------------------------------------------------------------------

    @property
    def current(self) -> _Token:
        return self.tokens[self.index]

    def _fail(self, message: str, token: _Token | None = None) -> FilterError:
        return _error(message, text=self.text, position=(token or self.current).position)

    def _keyword(self, *words: str) -> bool:
        """Consume the current token when it is one of ``words`` (a keyword)."""
        token = self.current
        if token.kind is _Kind.NAME and token.text.upper() in words:
            self.index += 1
            return True
        return False

    def _punct(self, char: str) -> bool:
        if self.current.kind is _Kind.PUNCT and self.current.text == char:
            self.index += 1
            return True
        return False

    def _expect_punct(self, char: str) -> None:
        if not self._punct(char):
            raise self._fail(f"expected {char!r}")

    # -- grammar ----------------------------------------------------------------------------

    def _at_end(self) -> bool:
        return self.current.kind is _Kind.END

    def parse(self) -> pc.Expression:
        if self._at_end():
            raise self._fail("empty expression")
        expression = self._or()
        if not self._at_end():
            raise self._fail("expected AND, OR or the end")
        return expression

    def _or(self) -> pc.Expression:
        expression = self._and()
        while self._keyword("OR"):
            expression = expression | self._and()
        return expression

    def _and(self) -> pc.Expression:
        expression = self._not()
        while self._keyword("AND"):
            expression = expression & self._not()
        return expression

    def _not(self) -> pc.Expression:
        if self._keyword("NOT"):
            return ~self._not()
        return self._predicate()

    def _predicate(self) -> pc.Expression:
        if self._punct("("):
            inner = self._or()
            self._expect_punct(")")
            return inner
        start = self.current
        left = self._operand()
        token = self.current
        if token.kind is _Kind.OPERATOR:
            self.index += 1
            right = self._operand()
            return self._compare(token.text, left, right, token)
        if self._keyword("IS"):
            negate = self._keyword("NOT")
            if not self._keyword("NULL"):
                raise self._fail("expected NULL after IS")
            field = self._field(left, start)
            return ~pc.is_null(field) if negate else pc.is_null(field)
        negate = self._keyword("NOT")
        if self._keyword("IN"):
            found = self._in(left, start)
        elif self._keyword("LIKE"):
            found = self._like(left, start)
        elif self._keyword("BETWEEN"):
            found = self._between(left)
        elif negate:
            raise self._fail("expected IN, BETWEEN or LIKE after NOT")
        elif isinstance(left, _Column) and pa.types.is_boolean(left.type):
            return pc.field(left.name)
        else:
            raise self._fail("expected a comparison (=, !=, <, <=, >, >=), IS [NOT] NULL, IN, BETWEEN or LIKE")
        return ~found if negate else found

    def _in(self, left: _Operand, start: _Token) -> pc.Expression:
        column = self._column_of(left, start, "IN")
        self._expect_punct("(")
        values = [self._literal()]
        while self._punct(","):
            values.append(self._literal())
        self._expect_punct(")")
        # a number the column cannot hold exactly equals none of its values
        held = [v for v in values if (exact := _exact(v.value, column.type)) is None or _on_grid(exact, column.type)]
        array = pa.array([self._coerce(v, column) for v in held], type=column.type)
        self._check_kernel(lambda: pc.is_in(pa.array([], column.type), value_set=array),
                           f"IN does not apply to column {column.name!r} ({column.type})", start)
        # Unknown (NULL) for a NULL value, as SQL's IN: pyarrow's is_in says false, which NOT
        # would turn into true and keep the row.
        field = pc.field(column.name)
        return pc.if_else(pc.is_valid(field), pc.is_in(field, value_set=array), pc.scalar(pa.scalar(None, pa.bool_())))

    def _between(self, left: _Operand) -> pc.Expression:
        """SQL's BETWEEN: both bounds inclusive; the AND after the low bound is the construct's
        own, so it binds before any AND of the filter."""
        low_token = self.current
        low = self._operand()
        if not self._keyword("AND"):
            raise self._fail("expected AND between the bounds of BETWEEN")
        high_token = self.current
        high = self._operand()
        return self._compare(">=", left, low, low_token) & self._compare("<=", left, high, high_token)

    def _like(self, left: _Operand, start: _Token) -> pc.Expression:
        """SQL's LIKE: ``%`` any characters, ``_`` one, a backslash escapes either; NULL for a
        NULL value (pyarrow's match_like)."""
        column = self._column_of(left, start, "LIKE")
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            raise self._fail(f"LIKE needs a text column; {column.name!r} is {column.type}", start)
        token = self.current
        if token.kind is not _Kind.STRING:
            raise self._fail("expected a 'pattern' after LIKE")
        self.index += 1
        return pc.match_like(pc.field(column.name), token.text)

    def _operand(self) -> _Operand:
        token = self.current
        if token.kind is _Kind.QUOTED_NAME or (token.kind is _Kind.NAME and token.text.upper() not in _KEYWORDS):
            self.index += 1
            if token.text not in self.schema.names:
                raise self._fail(f"unknown column {token.text!r}; the table has {', '.join(self.schema.names)}",
                                 token)
            return _Column(token.text, self.schema.field(token.text).type)
        return self._literal()

    def _literal(self) -> _Literal:
        token = self.current
        value: object
        if token.kind is _Kind.STRING:
            value = token.text
        elif token.kind is _Kind.NUMBER:
            value = float(token.text) if any(c in token.text for c in ".eE") else int(token.text)
        elif token.kind is _Kind.NAME and token.text.upper() in ("TRUE", "FALSE"):
            value = token.text.upper() == "TRUE"
        elif token.kind is _Kind.NAME and token.text.upper() == "NULL":
            value = None
        else:
            raise self._fail("expected a column or a value")
        self.index += 1
        return _Literal(value, token.position)

    # -- typing -----------------------------------------------------------------------------

    def _column_of(self, operand: _Operand, token: _Token, what: str) -> _Column:
        if not isinstance(operand, _Column):
            raise self._fail(f"{what} needs a column on its left", token)
        return operand

    def _field(self, operand: _Operand, token: _Token) -> pc.Expression:
        return pc.field(self._column_of(operand, token, "IS NULL").name)

    def _coerce(self, literal: _Literal, column: _Column) -> pa.Scalar:
        """``literal`` as a value of ``column``'s type (a cast, so '2024-01-01' is a date)."""
        if literal.value is None:
            raise _error("NULL compares as unknown; use IS NULL", text=self.text, position=literal.position)
        try:
            if pa.types.is_decimal(column.type) and not isinstance(literal.value, bool):
                # Through Decimal: an int64 or double literal cast to decimal(10, 2) would need
                # the precision of its own type, and a double is not exact.
                return pa.scalar(decimal.Decimal(str(literal.value)), type=column.type)
            return pa.scalar(literal.value).cast(column.type)
        except decimal.InvalidOperation:
            raise _error(f"{literal.value!r} is not a value of column {column.name!r} ({column.type})",
                             text=self.text, position=literal.position) from None
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError) as error:
            raise _error(f"{literal.value!r} is not a value of column {column.name!r} ({column.type}): "
                             f"{str(error).splitlines()[0]}", text=self.text, position=literal.position) from None

    def _check_kernel(self, call: Callable[[], object], message: str, token: _Token) -> None:
        """Fail at ``token`` with ``message`` when pyarrow has no kernel for ``call`` (run on
        empty arrays), instead of the scan failing later on the first batch."""
        try:
            call()
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise self._fail(message, token) from None

    def _compare(self, operator: str, left: _Operand, right: _Operand, token: _Token) -> pc.Expression:
        column, literal = (left, right) if isinstance(left, _Column) else (right, left)
        if isinstance(column, _Column) and isinstance(literal, _Literal):
            exact = _exact(literal.value, column.type)
            if exact is not None and not _on_grid(exact, column.type):
                operator = operator if column is left else _FLIPPED[operator]
                return _off_grid(operator, column, exact)
        compare = _COMPARISONS[operator]
        sides: list[tuple[pc.Expression, pa.DataType, str]] = []  # expression, type, description
        for operand, other in ((left, right), (right, left)):
            if isinstance(operand, _Column):
                sides.append((pc.field(operand.name), operand.type, f"column {operand.name!r} ({operand.type})"))
            elif isinstance(other, _Column):
                sides.append((pc.scalar(self._coerce(operand, other)), other.type, repr(operand.value)))
            else:
                raise self._fail("a comparison needs a column on one side", token)
        (left_value, left_type, left_text), (right_value, right_type, right_text) = sides
        self._check_kernel(lambda: compare(pa.array([], left_type), pa.array([], right_type)),
                           f"{operator} does not apply to {left_text} and {right_text}", token)
        return compare(left_value, right_value)


_FLIPPED = {"=": "=", "==": "==", "!=": "!=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
# wide enough for any DECIMAL(38, s) bound and the literal beside it
_EXACT = decimal.Context(prec=100)


def _exact(value: object, type_: pa.DataType) -> decimal.Decimal | None:
    """``value`` as an exact number when it is a number compared with an integer or decimal
    column (the comparisons whose column may not hold it), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not (pa.types.is_integer(type_) or pa.types.is_decimal(type_)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None  # no column value equals it; the cast reports it
    return decimal.Decimal(str(value))


def _grid(type_: pa.DataType) -> tuple[decimal.Decimal, decimal.Decimal, decimal.Decimal]:
    """The step between values of an integer or decimal type, its least and its greatest."""
    if pa.types.is_integer(type_):
        bits = type_.bit_width
        signed = pa.types.is_signed_integer(type_)
        low = -(2 ** (bits - 1)) if signed else 0
        high = 2 ** (bits - 1) - 1 if signed else 2 ** bits - 1
        return decimal.Decimal(1), decimal.Decimal(low), decimal.Decimal(high)
    step = decimal.Decimal(1).scaleb(-type_.scale)
    high = _EXACT.multiply(decimal.Decimal(10 ** type_.precision - 1), step)
    return step, -high, high


def _on_grid(value: decimal.Decimal, type_: pa.DataType) -> bool:
    step, low, high = _grid(type_)
    return low <= value <= high and _EXACT.remainder(value, step) == 0


def _off_grid(operator: str, column: _Column, value: decimal.Decimal) -> pc.Expression:
    """``column <operator> value`` for a ``value`` the column's type cannot hold, as a comparison
    with the nearest value it can (``n > 1.5`` is ``n >= 2``), or as true or false for every row
    but NULLs (unknown, as SQL's)."""
    field = pc.field(column.name)
    never, always = field != field, field == field
    if operator in ("=", "=="):
        return never
    if operator in ("!=", "<>"):
        return always
    step, low, high = _grid(column.type)
    steps = _EXACT.divide(value, step)
    if operator in ("<", "<="):
        if value < low:
            return never
        bound = min(high, _EXACT.multiply(steps.to_integral_value(decimal.ROUND_FLOOR), step))
        return field <= pc.scalar(_typed(bound, column.type))
    if value > high:
        return never
    bound = max(low, _EXACT.multiply(steps.to_integral_value(decimal.ROUND_CEILING), step))
    return field >= pc.scalar(_typed(bound, column.type))


def _typed(value: decimal.Decimal, type_: pa.DataType) -> pa.Scalar:
    if pa.types.is_integer(type_):
        return pa.scalar(int(value), type=type_)
    return pa.scalar(value.quantize(decimal.Decimal(1).scaleb(-type_.scale), context=_EXACT), type=type_)


def parse(text: str, schema: pa.Schema) -> pc.Expression:
    """The filter ``text`` means over rows of ``schema`` (FilterError pointing at the bad token)."""
    return _Parser(text, schema).parse()


def as_expression(row_filter: pc.Expression | str | None, schema: pa.Schema, table: str) -> pc.Expression | None:
    """A filter given as an expression or as text, as an expression (None for None); ScanError
    naming ``table`` for anything else, FilterError for text that does not parse."""
    if row_filter is None:
        return None
    if isinstance(row_filter, pc.Expression):
        return _with_typed_literals(row_filter, schema, table)
    if isinstance(row_filter, str):
        try:
            return parse(row_filter, schema)
        except FilterError as error:
            raise error.in_table(table) from None
    raise ScanError(f"filter must be a pyarrow.compute.Expression or a SQL-like string, got {row_filter!r}",
                    table=table)


def _with_typed_literals(expression: pc.Expression, schema: pa.Schema, table: str) -> pc.Expression:
    """``expression``, or when pyarrow cannot bind it because it compares a decimal column with
    a plain number (``pc.field("amount") > 1`` on a DECIMAL(12, 2): pyarrow 26 casts the number
    to a decimal too narrow for it), the same filter read from its text as a SQL-like filter,
    which gives each literal its column's type. FilterError when that text is not one."""
    try:
        ds.dataset(_probe_row(schema)).to_table(filter=expression)
    except pa.ArrowInvalid as error:
        if not any(cause in str(error) for cause in _DECIMAL_BINDING_ERRORS):
            return expression  # any other problem is reported where the filter is applied
        text = _as_filter_text(str(expression))
        try:
            return parse(text, schema)
        except FilterError:
            raise FilterError(f"pyarrow cannot compare a decimal column with the number in {expression} ({error}): "
                              "give the number as a decimal (pa.scalar(Decimal('1'))), or the filter as text "
                              "(\"amount > 1\")", table=table) from None
    return expression


# pyarrow's errors for a decimal column and a plain number: binding ``amount > 1``, and an
# ``isin`` of integers, which casts the column's values to integers
_DECIMAL_BINDING_ERRORS = ("Precision is not great enough", "Rescaling Decimal value would cause data loss")


def _probe_row(schema: pa.Schema) -> pa.Table:
    """One row to try a filter on: the smallest fraction in each decimal column with a scale
    (so that an ``isin`` of integers fails here, not on the first such value a scan reads),
    null elsewhere."""
    def column(t: pa.DataType) -> pa.Array:
        if pa.types.is_decimal(t) and t.scale > 0:
            return pa.array([decimal.Decimal(1).scaleb(-t.scale)], t)
        return pa.nulls(1, t)
    return pa.Table.from_arrays([column(f.type) for f in schema], schema=schema)


def _as_filter_text(printed: str) -> str:
    """A pyarrow expression as pyarrow prints it (``((a > 1) and (s == "x"))``), as filter text:
    string literals in single quotes, ``invert(...)`` as ``NOT (...)``."""
    strings = re.sub(r'"((?:[^"\\]|\\.)*)"',
                     lambda m: "'" + m.group(1).replace('\\"', '"').replace("'", "''") + "'", printed)
    return strings.replace("invert(", "NOT (")
