"""The code in a classic DataFrame's analyzed plan that the printed plan does not show: UDFs, and whether the
plan is deterministic once built-in Spark ML transformers are keyed by what they compute.

Spark ML transformers add ScalaUDF expressions whose function is a JVM closure: the plan prints only
"UDF(...)", and VectorAssembler and StringIndexerModel mark theirs non-deterministic (to keep the optimizer
from moving them; they compute the same output for the same input). For the transformers in
`CONTENT_KEYED`, the closure is Java-serialized - the bytes hold what it captured: the params and the fitted
state (means and stds, label indices, category sizes) - and its SHA-256 with the UDF's result type names the
computation. A closure that refers to a broadcast variable (only an id, whose content another application
may reuse) is not keyed. Every other JVM or Python UDF, aggregator or user-defined function stays opaque.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

# Spark ML classes whose transform() UDF is deterministic and captures its state by value (checked per class).
CONTENT_KEYED = frozenset(
    {
        "org.apache.spark.ml.feature.VectorAssembler",
        "org.apache.spark.ml.feature.StandardScalerModel",
        "org.apache.spark.ml.feature.StringIndexerModel",
        "org.apache.spark.ml.feature.OneHotEncoderModel",
        # vector_to_array and array_to_vector (materialize's own conversion): Spark 3.5, then Spark 4
        "org.apache.spark.ml.functions",
        "org.apache.spark.sql.ml.InternalFunctionRegistration",
    }
)
_SCALA_UDF = "org.apache.spark.sql.catalyst.expressions.ScalaUDF"
_SUBQUERY = "org.apache.spark.sql.catalyst.expressions.SubqueryExpression"
# Where `deterministic` is defined when a node only passes on its children's (or its expressions') answer.
_DERIVED_DETERMINISM = {
    "org.apache.spark.sql.catalyst.expressions.Expression",
    "org.apache.spark.sql.catalyst.plans.QueryPlan",
}
_OPAQUE_CLASS = re.compile(r"\.(Python\w*|Scala(UDF|UDAF|Aggregator)|\w*UserDefined\w*)$")
_BROADCAST = b"org.apache.spark.broadcast."
# VectorAssembler names the numbers it casts "<column>_double_<its uid>": a random id, not what it computes.
_ASSEMBLER_UID = re.compile(r"(_double_VectorAssembler)_[0-9a-f]{12}\b")


@dataclass
class PlanCode:
    """What `examine` found: keyed transformer UDFs, opaque expressions, and determinism."""

    fingerprints: list[str] = field(default_factory=list)
    """One per content-keyed transformer UDF, in plan order: its class, and a hash of its closure and type."""
    opaque: list[str] = field(default_factory=list)
    """Class names of expressions whose code is outside the plan and not keyed."""
    deterministic: bool = True
    """False when an expression or plan node other than a keyed transformer UDF is non-deterministic."""


def examine(spark: Any, plan: Any) -> PlanCode:
    """Walk `plan` (and its subqueries) once, on the JVM, through py4j."""
    found = PlanCode()
    _walk_plan(spark._jvm, plan, found)
    return found


def without_uids(text: str) -> str:
    """The printed plan with the random ids of keyed transformers' objects taken out."""
    return _ASSEMBLER_UID.sub(r"\1", text)


def _walk_plan(jvm: Any, plan: Any, found: PlanCode) -> None:
    if not plan.deterministic() and not _derived(plan):
        found.deterministic = False
    for expression in _seq(plan.expressions()):
        _walk_expression(jvm, expression, found)
    for child in _seq(plan.children()):
        _walk_plan(jvm, child, found)


def _walk_expression(jvm: Any, expression: Any, found: PlanCode) -> None:
    name = str(expression.getClass().getName())
    fingerprint = _fingerprint(jvm, expression) if name == _SCALA_UDF else None
    if fingerprint is not None:
        found.fingerprints.append(fingerprint)
    else:
        if _OPAQUE_CLASS.search(name):
            found.opaque.append(name)
        if not expression.deterministic() and not _derived(expression):
            found.deterministic = False
    if jvm.java.lang.Class.forName(_SUBQUERY).isInstance(expression):
        _walk_plan(jvm, expression.plan(), found)
    for child in _seq(expression.children()):
        _walk_expression(jvm, child, found)


def _fingerprint(jvm: Any, udf: Any) -> str | None:
    """The keyed transformer and a hash of its serialized closure and result type; None if not CONTENT_KEYED."""
    function = udf.function()
    owner = str(function.getClass().getName()).split("$$", 1)[0]
    if owner not in CONTENT_KEYED:
        return None
    buffer = jvm.java.io.ByteArrayOutputStream()
    stream = jvm.java.io.ObjectOutputStream(buffer)
    stream.writeObject(function)
    stream.close()
    closure = bytes(buffer.toByteArray())
    if _BROADCAST in closure:
        return None
    digest = hashlib.sha256(closure)
    digest.update(f"{udf.dataType().json()} {udf.nullable()} {udf.udfName()}".encode())
    return f"{owner} {digest.hexdigest()}"


def _derived(node: Any) -> bool:
    """True when the node's `deterministic` is the default one, which only repeats what its parts say."""
    declared = node.getClass().getMethod("deterministic", None).getDeclaringClass().getName()
    return str(declared) in _DERIVED_DETERMINISM


def _seq(items: Any) -> list[Any]:
    return [items.apply(i) for i in range(items.length())]
