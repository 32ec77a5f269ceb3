"""SymPy derivations that the chapters display and the tests assert, one module per topic."""
