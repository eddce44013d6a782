"""Detection policy: pure, replayable, shared by the Flink job, the backtest and alerting."""
