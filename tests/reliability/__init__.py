"""The reliability suite: crash matrix, hostile input, concurrency, git hygiene, fold properties."""
