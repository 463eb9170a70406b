"""fakenet: a fake internet built from network namespaces, for tests, benchmarks and the demo."""
