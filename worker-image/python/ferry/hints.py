"""Which type hints an argument's JSON value is checked against: one rule for the scanner (ferry
dev's input check and its OpenAPI document, cli/build/scan.py, which loads this file by path) and
the load-balanced runtime's body check (ferry/lb.py). Only the standard library: the scanner imports
no user code and not the ferry package.

Checked: int, float, str, bool, dict, list, tuple and typing's Dict, List, Tuple (generics by the
outer type only: `dict[str, int]` is a dict), each with None beside it or not (`Optional[X]`,
`Union[X, None]`, `X | None`). Anything else (a class of the user's, numpy's or torch's types,
`Union[int, str]`, Literal, Annotated, no annotation) passes unchecked.
"""

import ast

# The kind of JSON value each checked name takes (a tuple comes as a list).
HINTED_NAMES = {"int": "int", "float": "float", "str": "str", "bool": "bool", "dict": "dict", "Dict": "dict",
                "list": "list", "List": "list", "tuple": "list", "Tuple": "list"}
# Where a dotted annotation may name one of them: `typing.List`, `builtins.int`. Any other module's
# `int` or `float` (`np.float`, `torch.float`) is that module's own type, left unchecked.
TYPE_MODULES = ("typing", "builtins")


def hinted_node(node):
    """(kind, whether None is allowed) for an annotation's AST node that is checked, else None. A
    quoted annotation (a string constant) is read as the text it holds."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except (SyntaxError, ValueError):  # not Python: a hint nothing checks
            return None
    if isinstance(node, ast.Subscript):
        name = type_name(node.value)
        if name in ("Optional", "Union"):
            inner = node.slice
            if isinstance(inner, getattr(ast, "Index", ())):  # Python 3.8 wraps it
                inner = inner.value
            members = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            found = _union(members)
            return (found[0], True) if found and name == "Optional" else found
        node = node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union([node.left, node.right])
    kind = HINTED_NAMES.get(type_name(node))
    return (kind, False) if kind else None


def _union(members):
    """A union is checked when it is one type, with None beside it or not."""
    kinds = [member for member in members if not is_none(member)]
    found = hinted_node(kinds[0]) if len(kinds) == 1 else None
    return (found[0], found[1] or len(kinds) < len(members)) if found else None


def is_none(node):
    return isinstance(node, ast.Constant) and node.value is None


def type_name(node):
    """`int` for `int`, `List` for `typing.List`; None for another module's name or any other node."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in TYPE_MODULES:
        return node.attr
    return None
