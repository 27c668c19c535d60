"""The tile compiler: int8 graph -> tile layers -> command stream."""
