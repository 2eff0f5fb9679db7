"""What a Spark Connect DataFrame's cache key is made of: the plan the client sends (complete, no JVM object
on this side) and the plan the server analyzed from it, and whether they name the data from outside the session.

The client's plan is the proto message the client sends; its plan ids (a per-process counter) are numbered
in order of appearance so the same query gets the same plan in any session. It names the data only when
it is built from file reads (parquet, csv, json, orc, text, avro paths) and pure relational steps, calling
built-in functions that are deterministic (the server's catalog says which class a name resolves to).
Anything else - Python or JVM UDFs, local or cached data, tables, views and SQL text resolved in the
server's catalog, other sources - leaves the data identifiable only inside this session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FILE_FORMATS = frozenset({"parquet", "csv", "json", "orc", "text", "avro"})
# proto oneof names (spark.connect.Relation.rel_type, spark.connect.Expression.expr_type) that add no data
_PURE_RELATIONS = frozenset(
    {
        "read", "project", "filter", "join", "set_op", "sort", "limit", "offset", "tail", "aggregate",
        "deduplicate", "range", "drop", "with_columns", "with_columns_renamed", "to_df", "subquery_alias",
        "hint", "unpivot", "to_schema", "fill_na", "drop_na", "replace", "sample", "repartition",
        "repartition_by_expression",
    }
)  # fmt: skip
_PURE_EXPRESSIONS = frozenset(
    {
        "unresolved_attribute", "literal", "alias", "cast", "unresolved_star", "sort_order",
        "unresolved_extract_value", "lambda_function", "unresolved_named_lambda_variable", "update_fields",
        "unresolved_regex", "unresolved_function", "expression_string",
    }
)  # fmt: skip
_BUILT_IN = "org.apache.spark.sql.catalyst.expressions."
_NON_DETERMINISTIC = re.compile(
    r"(^|[.\W])(rand\w*|random|uuid|shuffle|monotonically_?increasing_?id|spark_?partition_?id|input_?file\w*|"
    r"current\w*|now|localtimestamp|unix_timestamp|uniform|reflect|java_method|try_reflect|"
    r"CallMethodViaReflection)($|\W)",
    re.IGNORECASE,
)
_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")
_PLAN_ID = "plan_id"


@dataclass(frozen=True)
class ConnectPlan:
    client_plan: Any
    """The proto plan as a dict, plan ids numbered in order of appearance."""
    analyzed: str
    """The server's analyzed logical plan, as printed (expression ids as the server numbered them)."""
    opaque: tuple[str, ...]
    """What in the plan names data only inside this session (empty: the plan names its data)."""
    session: tuple[str, str]
    """This Connect session's id and the plan with its own plan ids: unique to this DataFrame."""


def connect_plan(frame: Any) -> ConnectPlan:
    from google.protobuf.json_format import MessageToDict

    spark = frame.sparkSession
    proto = frame._plan.to_proto(spark.client)
    functions: set[str] = set()
    opaque = _opaque_parts(proto, functions)
    opaque += [
        f"function {name}" for name in sorted(functions) if not _built_in_and_deterministic(spark, name)
    ]
    as_dict = MessageToDict(proto, preserving_proto_field_name=True)
    return ConnectPlan(
        client_plan=_renumbered_plan_ids(as_dict, {}),
        analyzed=_analyzed_text(frame),
        opaque=tuple(opaque),
        session=(str(spark.session_id), proto.SerializeToString(deterministic=True).hex()),
    )


def _opaque_parts(message: Any, functions: set[str]) -> list[str]:
    """Relations and expressions of the proto plan that do not name their data; collects function names."""
    from google.protobuf.message import Message

    found = []
    kind = message.DESCRIPTOR.full_name
    if kind == "spark.connect.Relation":
        relation = message.WhichOneof("rel_type")
        if relation not in _PURE_RELATIONS or (relation == "read" and not _reads_files(message.read)):
            found.append(f"relation {relation}")
    elif kind == "spark.connect.Expression":
        expression = message.WhichOneof("expr_type")
        if expression not in _PURE_EXPRESSIONS:
            found.append(f"expression {expression}")
        elif expression == "unresolved_function":
            functions.add(message.unresolved_function.function_name)
        elif expression == "expression_string":
            functions.update(_CALL.findall(message.expression_string.expression))
            if _NON_DETERMINISTIC.search(message.expression_string.expression):
                found.append(f"expression {message.expression_string.expression!r}")
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        if isinstance(value, Message):
            items: Any = [value]
        elif field.message_type.GetOptions().map_entry:  # a map: its values may be messages or scalars
            items = [item for item in value.values() if isinstance(item, Message)]
        else:  # a repeated field
            items = value
        for item in items:
            found += _opaque_parts(item, functions)
    return found


def _reads_files(read: Any) -> bool:
    source = read.data_source
    return (
        read.WhichOneof("read_type") == "data_source"
        and source.format.lower() in FILE_FORMATS
        and bool(source.paths)
    )


def _built_in_and_deterministic(spark: Any, name: str) -> bool:
    """Operators (+, ==) are built in; a named function is when the catalog resolves it to a Spark class."""
    if not name[:1].isalpha() and name[:1] != "_":
        return True
    if _NON_DETERMINISTIC.search(name):
        return False
    try:
        class_name = str(spark.catalog.getFunction(name).className)
    except Exception:  # unknown to the catalog (a SQL keyword such as IN, or a name it cannot resolve)
        return False
    return class_name.startswith(_BUILT_IN) and not _NON_DETERMINISTIC.search(class_name)


def _renumbered_plan_ids(value: Any, numbers: dict[str, int]) -> Any:
    if isinstance(value, dict):
        return {
            key: numbers.setdefault(str(item), len(numbers))
            if key == _PLAN_ID
            else _renumbered_plan_ids(item, numbers)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_renumbered_plan_ids(item, numbers) for item in value]
    return value


def _analyzed_text(frame: Any) -> str:
    """The "Analyzed Logical Plan" section of the server's extended explain output."""
    text = str(frame._explain_string(extended=True))
    analyzed = text.split("== Analyzed Logical Plan ==", 1)[-1]
    return analyzed.split("== Optimized Logical Plan ==", 1)[0].strip()
