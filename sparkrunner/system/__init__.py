"""The operating system's side of a run, which every process may import (driver, barrier tasks, ranks): process
trees and their sweeps, addresses and ports, GPUs, self-removing temp folders, one-shot secret files, and the
executor a task runs in. Imports no driver, task or rank code."""
