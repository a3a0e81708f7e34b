"""Kubernetes itself: the only package that imports the `kubernetes` client (client/),
and the API server's and scheduler's own rules, reimplemented to the letter so they can
be checked offline: label keys and values, selectors, object validation, kinds, which
fields are sensitive."""
