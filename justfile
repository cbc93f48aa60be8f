# The tasks of insitubatch-rs: `just --list` (or `scripts/just`, which installs the pinned just
# first; tools/just/requirements.txt). The test recipes are the phases of scripts/test.sh, one
# recipe each: that script holds the one list of phases and their order, times each phase and
# prints the time table; a recipe runs one phase through it (`scripts/test.sh NAME`), with the
# fixtures and loopback servers that phase needs. `just test` runs them all, as the README's
# `scripts/test.sh` does; `just ci` is CI (.ci/run). The project-specific pieces (servers,
# fixtures, caches, the stress tally) stay in scripts/; recipes only name them.

set shell := ["bash", "-euo", "pipefail", "-c"]
# Recipe arguments reach the scripts as "$@", so they keep their quoting.
set positional-arguments

# List the tasks
[group('help')]
default:
    @{{ quote(just_executable()) }} --justfile {{ quote(justfile()) }} --list --unsorted

# The README's demo: an epoch of a small ERA5-like store (args: `insitubatch demo`'s)
[group('run')]
demo *args:
    scripts/demo.sh "$@"

# Serve the dashboard (www/) over the demo store (args: scripts/www.sh's, e.g. --store DIR)
[group('run')]
www *args:
    scripts/www.sh "$@"

# A 2-minute benchmark smoke against insitubatch 0.2.0, the reference implementation (bench/run.py --quick)
[group('run')]
bench-quick:
    source scripts/env.sh && ib_prereqs && cargo build --release -q -p insitubatch-native --bin insitubatch
    python3 bench/run.py --quick

# Every phase, in order, and the pass/fail count (the README's scripts/test.sh)
[group('test')]
test:
    scripts/test.sh

# CI: the whole test command on a clean checkout of HEAD, CI=true (.ci/run)
[group('test')]
ci:
    .ci/run

# fmt, clippy (host and wasm32), rustdoc, warnings denied (scripts/check.sh)
[group('phases of scripts/test.sh')]
check:
    scripts/test.sh check

# Unit, simulation and property tests of core and native
[group('phases of scripts/test.sh')]
test-rust:
    scripts/test.sh test-rust

# The Rust examples on the demo store (tokio stream, candle training loop)
[group('phases of scripts/test.sh')]
examples:
    scripts/test.sh examples

# Core built for wasm32, with no runtime in its dependency tree
[group('phases of scripts/test.sh')]
wasm32-core:
    scripts/test.sh wasm32-core

# The test stores zarr-python writes (tests/fixtures/make_fixtures.py)
[group('phases of scripts/test.sh')]
fixtures:
    scripts/test.sh fixtures

# libFuzzer on every parser of untrusted bytes, SECONDS each (scripts/fuzz.sh)
[group('phases of scripts/test.sh')]
fuzz seconds=env('IB_FUZZ_SECONDS', '30'):
    IB_FUZZ_SECONDS="$1" scripts/test.sh fuzz

# End-to-end: every store kind over loopback HTTP and S3 servers, faults
[group('phases of scripts/test.sh')]
test-e2e:
    scripts/test.sh test-e2e

# The wasm builds in Node and headless Chromium (scripts/test-wasm.sh)
[group('phases of scripts/test.sh')]
test-wasm:
    scripts/test.sh test-wasm

# The dashboard in headless Chromium (scripts/test-www.sh)
[group('phases of scripts/test.sh')]
test-www:
    scripts/test.sh test-www

# The Python package in its sessions, Python × framework: pytest, mypy (args: py=3.12 fw=tf, pytest's)
[group('phases of scripts/test.sh')]
test-python *args:
    scripts/test.sh test-python -- "$@"

# The notebook widget in JupyterLab and marimo (scripts/test-widget.sh)
[group('phases of scripts/test.sh')]
test-widget:
    scripts/test.sh test-widget

# The packages installed outside the repo and used (scripts/test-packages.sh)
[group('phases of scripts/test.sh')]
test-packages:
    scripts/test.sh test-packages

# The release artifacts as users get them (scripts/release.sh --check)
[group('phases of scripts/test.sh')]
release-check:
    scripts/test.sh release-check

# The book: build, link check, every code block run (scripts/test-docs.sh)
[group('phases of scripts/test.sh')]
docs:
    scripts/test.sh docs

# The sessions of test-python: each Python version × framework set, and its venv
[group('python')]
python-sessions:
    scripts/test-python.sh --list

# Relock the Python environments: tools/python/NAME.in -> NAME.txt (args: scripts/lock.sh's)
[group('python')]
lock *args:
    scripts/lock.sh "$@"
