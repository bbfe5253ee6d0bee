"""Test and application problems built on privcvx: federated logistic regression (Eq. (30)) and rendezvous."""

from problems import datasets
from problems.logistic import federated_logistic
from problems.rendezvous import rendezvous

__all__ = ["datasets", "federated_logistic", "rendezvous"]
