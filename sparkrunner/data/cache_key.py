"""The cache key of a materialized DataFrame: a hit only when the data is the same.

The key holds the whole analyzed plan (Spark's printed plan stops after 25 fields, so it is printed here
with no limit), each input file's identity, and the write options. Plans whose data cannot be named from
outside the running Spark application - Python or JVM UDFs, local or RDD data, JDBC and other non-file
sources, non-deterministic expressions, inputs that cannot be looked at - are keyed to this application
too, so another session never reuses their cache entries. Spark Connect DataFrames (no JVM object on the
client) are described by `connect_plan` under the same rules.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from sparkrunner.data import storage
from sparkrunner.data.connect_plan import connect_plan, is_connect_frame
from sparkrunner.errors import InvalidArgumentError

FORMAT_VERSION = 2
_NO_LIMIT = 2**31 - 1
_EXPRESSION_ID = re.compile(r"#(\d+)")
# Plan leaves whose data is named by what the plan prints plus their input files.
_FILE_RELATIONS = {"HadoopFsRelation"}
_SELF_DESCRIBING_LEAVES = {"Range", "OneRowRelation", "HiveTableRelation"}
# Expressions whose behaviour lives in code outside the plan (a pickled Python function, a JVM class).
_OPAQUE_EXPRESSION = re.compile(
    r'"class":"[\w.$]*\.(Python\w*|Scala(UDF|UDAF|Aggregator)|\w*UserDefined\w*)"'
)


def cache_key(frame: Any, options: dict[str, int]) -> str:
    """A folder name for this DataFrame's data written with `options`."""
    description = cache_description(frame, options)
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:24]


def cache_description(frame: Any, options: dict[str, int]) -> dict[str, Any]:
    """What the key is made of; holds "session" when the data can be told apart only inside this application."""
    if is_connect_frame(frame):
        return _connect_description(frame, options)
    plan = _analyzed_plan(frame)
    text = _full_text(plan)
    leaves = [_leaf_description(leaf) for leaf in _leaves(plan)]
    files = storage.file_identities(sorted(frame.inputFiles()))
    described: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "plan": _renumbered(text),
        "leaves": leaves,
        "files": files,
        "options": options,
    }
    identifiable = (
        files is not None
        and all(leaf is not None for leaf in leaves)
        and bool(plan.deterministic())
        and not _OPAQUE_EXPRESSION.search(plan.toJSON())
    )
    if not identifiable:  # the plan with its expression ids is unique to this DataFrame in this application
        described["session"] = [frame.sparkSession.sparkContext.applicationId, text]
    return described


def _connect_description(frame: Any, options: dict[str, int]) -> dict[str, Any]:
    """A Spark Connect DataFrame: the client's plan, the server's analyzed plan, the input files."""
    plan = connect_plan(frame)
    files = storage.file_identities(sorted(frame.inputFiles()))
    described: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "client_plan": plan.client_plan,
        "plan": _renumbered(plan.analyzed),
        "files": files,
        "options": options,
    }
    if files is None or plan.opaque:  # the session's id and the plan with its own ids: this DataFrame only
        described["session"] = list(plan.session)
    return described


def _analyzed_plan(frame: Any) -> Any:
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        raise InvalidArgumentError(
            f"materialize takes a classic or a Spark Connect DataFrame, not a {type(frame).__name__}"
        )
    return jdf.queryExecution().analyzed()


def _full_text(plan: Any) -> str:
    """The verbose plan with every field (Spark 4 added an argument to treeString; 3.5 has four)."""
    from py4j.protocol import Py4JError

    try:
        return str(plan.treeString(True, False, _NO_LIMIT, False, False))
    except Py4JError:
        return str(plan.treeString(True, False, _NO_LIMIT, False))


def _renumbered(text: str) -> str:
    """Expression ids (#123) numbered in order of appearance: the same query gets the same text in any session."""
    numbers: dict[str, int] = {}
    return _EXPRESSION_ID.sub(lambda m: f"#{numbers.setdefault(m.group(1), len(numbers))}", text)


def _leaves(plan: Any) -> list[Any]:
    leaves = plan.collectLeaves()
    return [leaves.apply(i) for i in range(leaves.length())]


def _leaf_description(leaf: Any) -> str | None:
    """A leaf's source and read options when they name its data (with the input files), else None."""
    name = str(leaf.nodeName())
    if name in _SELF_DESCRIBING_LEAVES:
        return name
    if name in ("Relation", "LogicalRelation"):
        relation = leaf.relation()
        if relation.getClass().getSimpleName() in _FILE_RELATIONS:
            return f"{relation.fileFormat().toString()} {relation.options().toString()}"
    return None
