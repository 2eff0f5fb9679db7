"""The cache key of a materialized DataFrame: a hit only when the data is the same.

The key holds the whole analyzed plan (Spark's printed plan stops after 25 fields, so it is printed here
with no limit) with its expression ids numbered in order of appearance, each input file's identity, the
write options, and for built-in Spark ML transformers (JVM UDFs the plan prints as "UDF(...)") a hash of
what they compute (`plan_code`). Such a key names the data in any session. A plan over pandas data
(a LocalRelation) is named by its leaves' own ids too, so it is reused only inside this application. A
plan whose data cannot be named at all - other Python or JVM UDFs, RDDs, JDBC and other non-file sources,
non-deterministic expressions, inputs that cannot be looked at - gets a key of its own on every call, so
it is never reused. Spark Connect DataFrames (no JVM object on the client) are described by
`connect_plan` under the same rules.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any

from sparkrunner.common import storage
from sparkrunner.data.driver import plan_code
from sparkrunner.data.driver.connect_plan import connect_plan
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.placement.spark_sessions import is_connect_session

FORMAT_VERSION = 3
_NO_LIMIT = 2**31 - 1
_EXPRESSION_ID = re.compile(r"#(\d+)")
# Plan leaves whose data is named by what the plan prints plus their input files.
_FILE_RELATIONS = {"HadoopFsRelation"}
_SELF_DESCRIBING_LEAVES = {"Range", "OneRowRelation", "HiveTableRelation"}
# Plan leaves holding their data in the plan itself: named inside this application by their own ids.
_IN_PLAN_DATA = {"LocalRelation"}


def cache_key(frame: Any, options: dict[str, int]) -> str:
    """A folder name for this DataFrame's data written with `options`."""
    description = cache_description(frame, options)
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()[:24]


def cache_description(frame: Any, options: dict[str, int]) -> dict[str, Any]:
    """What the key is made of: with "session" when the data can be told apart only inside this application,
    with "call" (a random id: never reused) when it cannot be told apart at all."""
    if is_connect_session(frame):
        return _connect_description(frame, options)
    plan = _analyzed_plan(frame)
    code = plan_code.examine(frame.sparkSession, plan)
    leaves = _leaves(plan)
    described_leaves = [_leaf_description(leaf) for leaf in leaves]
    files = storage.file_identities(sorted(frame.inputFiles()))
    described: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "plan": _renumbered(plan_code.without_uids(_full_text(plan))),
        "leaves": described_leaves,
        "files": files,
        "options": options,
        "transformers": code.fingerprints,
    }
    if code.fingerprints:  # a transformer's code may change between Spark versions
        described["spark"] = str(frame.sparkSession.version)
    in_plan = [str(leaf.output().toString()) for leaf in leaves if _holds_its_data(leaf)]
    unnamed = sum(
        text is None and not _holds_its_data(leaf)
        for leaf, text in zip(leaves, described_leaves, strict=True)
    )
    if files is None or code.opaque or not code.deterministic or unnamed:
        described["call"] = uuid.uuid4().hex
    elif in_plan:  # the leaves' expression ids (with their data) are unique to this application
        described["session"] = [frame.sparkSession.sparkContext.applicationId, in_plan]
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


def _holds_its_data(leaf: Any) -> bool:
    return str(leaf.nodeName()) in _IN_PLAN_DATA


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
