"""Whether a call's input fits a function's signature, said as ferry dev says it for a queue route
(cli/dev/inputs.ts inputMismatch): every missing required argument, every key the function does not
take, and every value of another type than its hint, at once. inspect.Signature.bind() names only
the first problem, in Python's words ("missing a required argument: 'x'"), which tells a caller one
mistake per try. The one owner for the queue worker's binding (ferry/invoke.py bind_kwargs) and the
load-balanced runtime's 400 (ferry/lb.py).

Which hints are checked is ferry/hints.py's rule, read here on the live annotation or on its text
(from __future__ import annotations). Nothing is converted: a value fits when json made it of the
hinted type already, and an int fits where a float is hinted.
"""

import ast
import functools
import inspect
import json
import types
import typing

from .hints import hinted_node

# The live hints a value is checked against, by the kind of JSON value each takes.
_HINTED = {int: "int", float: "float", str: "str", bool: "bool", dict: "dict", list: "list", tuple: "list"}
# What a JSON value of each Python type may be given for: an int passes where a float is hinted.
_FITS = {"int": ("int",), "float": ("float", "int"), "str": ("str",), "bool": ("bool",), "dict": ("dict",),
         "list": ("list",)}
_UNION_TYPES = (typing.Union,) + ((types.UnionType,) if hasattr(types, "UnionType") else ())
_P = inspect.Parameter
# The parameters an input key can give, by name.
_BY_NAME = (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)


def hinted_type(annotation):
    """(kind, whether None is allowed) for a hint that is checked, else None, by ferry/hints.py's rule,
    on the live annotation or its text (from __future__ import annotations): anything else (numpy's or
    torch's types, a class, Union[int, str], Literal, Annotated) passes unchecked."""
    if isinstance(annotation, str):
        return _hinted_text(annotation)
    if isinstance(annotation, type) and annotation in _HINTED:
        return _HINTED[annotation], False
    origin = typing.get_origin(annotation)
    if origin in _UNION_TYPES:
        # One type, with None beside it or not (Optional[X] is Union[X, None]).
        members = typing.get_args(annotation)
        kinds = [member for member in members if member is not type(None)]
        found = hinted_type(kinds[0]) if len(kinds) == 1 else None
        return (found[0], found[1] or len(kinds) < len(members)) if found else None
    if isinstance(origin, type) and origin in _HINTED:
        return _HINTED[origin], False
    return None


@functools.lru_cache(maxsize=1024)
def _hinted_text(annotation):
    """hinted_type of an annotation's text; parsed once per text, not on every request."""
    try:
        return hinted_node(ast.parse(annotation, mode="eval").body)
    except (SyntaxError, ValueError):  # not Python: a hint nothing checks
        return None


def _hint(param):
    """(kind, whether None is allowed) for a parameter whose hint is checked, else None. A default of
    None lets it take None too: the function gets what it would without the key."""
    if param.annotation is _P.empty:
        return None
    hint = hinted_type(param.annotation)
    return (hint[0], hint[1] or param.default is None) if hint else None


def _expected(hint):
    """What a hint takes, as ferry dev names it: "int", "list or None"."""
    return f"{hint[0]} or None" if hint[1] else hint[0]


def misfit(name, value, param):
    """What is wrong with a JSON value for its parameter, else None."""
    hint = _hint(param)
    if hint is None:
        return None
    got = "None" if value is None else type(value).__name__
    if got in _FITS[hint[0]] or (value is None and hint[1]):
        return None
    if value is None:
        return f"{name!r} must be {_expected(hint)}, got None"
    shown = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
    return f"{name!r} must be {_expected(hint)}, got {got} {shown}"


def input_problems(signature, kwargs, check_types=False, unchecked=()):
    """Each way `kwargs` does not fit `signature`, in ferry dev's words and order: the parameters' in
    the signature's order (a missing required one, with its hint; a value of another type), then the
    keys it does not take, unless it takes **kwargs; [] when the call binds. `check_types`: whether
    values are checked against their hints (a load-balanced body's are, a queue job's are not:
    docs/python.md); `unchecked`: keys whose value is checked elsewhere (path and query strings,
    converted by their hint)."""
    problems = []
    takes = []
    takes_any = False
    for name, param in signature.parameters.items():
        if param.kind is _P.VAR_KEYWORD:
            takes_any = True
        elif param.kind is _P.POSITIONAL_ONLY:
            # Before the / of `def f(x, /)`: no keyword gives it, and a key of its name is another.
            if param.default is _P.empty:
                problems.append(f"positional-only argument {name!r} cannot come from the input")
        elif param.kind in _BY_NAME:
            takes.append(name)
            if name not in kwargs:
                if param.default is _P.empty:
                    hint = _hint(param)
                    problems.append(f"missing required argument {name!r}{f' ({_expected(hint)})' if hint else ''}")
            elif check_types and name not in unchecked:
                problem = misfit(name, kwargs[name], param)
                if problem:
                    problems.append(problem)
    if not takes_any:
        known = set(takes)
        unknown = [key for key in kwargs if key not in known]
        if unknown:
            listed = ", ".join(takes) or "none"
            keys = ", ".join(repr(key) for key in unknown)
            problems.append(f"unexpected argument{'s' if len(unknown) > 1 else ''} {keys} (it takes: {listed})")
    return problems
