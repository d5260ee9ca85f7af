"""The tiny offline models the tests and the demo serve: the model, the draft/target pair and its
EAGLE-3 head, built from numpy without a download."""
