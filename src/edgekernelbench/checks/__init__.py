"""Checks of the suite that need the layers above it (the TVM reference, the oracles): `selfcheck` (does
each problem make sense?) and `add_model` (a user's model before it joins the user suite)."""
