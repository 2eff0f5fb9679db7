"""sparkrunner's version, in a module of its own: ranks compare theirs with the driver's without importing the
package's facade."""

__version__ = "0.1.0"
