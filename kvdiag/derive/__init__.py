"""Derived signals: what kvdiag computes from the collected ones (see :data:`STEPS`)."""
