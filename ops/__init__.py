"""Operations material: the broker scripts, benchmarks, chaos runs and deployment files."""
