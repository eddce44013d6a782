"""The demonstration of the product, apart from it: traffic generators, production-like
scenarios, the end-to-end journey `anchorwatch demo` walks and the slice it checks. Nothing
deployable (connectors, jobs, alerting) imports this package; tools/check_house.py holds
that line."""
