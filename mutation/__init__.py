"""Mutation testing of the reference runtime: how many one-line bugs does the suite catch?

``tox -e mutation`` (``python -m mutation run``) draws a seeded sample of small mutants of
``reference_runtime/`` (a comparison moved across its boundary, an operator or a constant
changed, a statement, lock, notify or join dropped, a copy handed out as the original, a
return value replaced: ``operators``), certifies each mutant as a fork would be certified,
against the conformance modules that can observe it (``targets``), and writes a report:
the kill rate, tables per module and per operator, every survivor with its diff, and the
cost per mutant (``report``). Mutants that cannot change behaviour are on a reviewed list
with their reasons (``equivalents.toml``) and are left out of the rate.

Why a generator of our own, and not mutmut or cosmic-ray
-------------------------------------------------------
Both were evaluated against this layout: the suite certifies a runtime chosen by
``--runtime MODULE``; the reference is a package; the suite runs under xdist; and some tests
start subprocesses that import the runtime by name (the worker, the workload command line).

mutmut 3.8 copies the package into ``mutants/``, turns every function into a trampoline that
picks the live mutant from an environment variable, and runs pytest in its own process,
forking one child per mutant; it chooses tests by the functions each test called during a
recording run. It does not fit: (1) it mutates only code inside functions (its README sends
module-level code to mutmut 2), so the thresholds the specification pins as module
constants (``FIXED_COST_US``, ``DURATION_STATISTICS_NUM_SESS``,
``K_MAX_INTERNAL_FRAGMENTATION``, the 10 s and 100 s statistics intervals...) are out of
reach; (2) it has no statement deletion, so no dropped ``notify``, ``join``, ``set`` or
counter update, no removed lock, no dropped copy: the bugs the issue is about; (3) calls
made in a subprocess never reach its recording run, so a mutant observed only through the
worker gets no test at all; (4) it has no seeded sampling (it runs every mutant; about
5000 here); (5) every string constant becomes mutants (``"XX...XX"``, case changes),
mostly in log and error messages no clause reads.

cosmic-ray 8.7 applies each mutant to the source file in place, runs one test command, and
restores the file. It does not fit either: (1) editing ``reference_runtime/`` in place makes
every other process reading the working tree (a development run, the meta-tests) run a
mutant, and running two mutants at once needs one clone per worker; (2) one test command
serves every mutant, so there is no selection of the modules that can observe the mutated
one; (3) it has neither statement deletion, lock removal, copy removal nor return
replacement (they could be written as operator plugins), and no sampling (its session
database would need a filter of our own); (4) it brings a dozen dependencies (SQLAlchemy,
aiohttp, GitPython, ...) for what is here a few hundred lines.

What this package does instead: mutants are exact text edits located by the ``ast``
positions of CPython (``operators``), so each mutant's diff is its one line and line numbers
do not move; a mutant runs in a copy of the runtime package named ``mutant_runtime``, placed
first on ``PYTHONPATH`` and certified with ``--runtime mutant_runtime``, exactly as a fork is
(``runner``): the working tree is never touched, and the worker and workload subprocesses,
which the runtime and the tests start by the runtime's own package name, run the mutant too.
Each run uses one core (no xdist), stops at the first failure, and has a per-test and a wall
limit; tests are chosen by a documented static map from runtime modules to the conformance
modules that observe them (``targets``), and a survivor is confirmed against the rest of the
suite, so the map can only cost time, never a kill. Samples are stable under unrelated edits
(``sampling``), so a seed drawn again after the suite was strengthened holds the same mutants.
The only dependencies are the standard library and pytest.

mutmut's operators are nevertheless available as a second mutant source
(``--generator mutmut``, ``mutmut_operators``, written from its documentation): a suite
measured only with operators designed together with it could miss a family of bugs neither
thought of, so a campaign with another tool's operators is the independent check.
"""
