"""lzk_rezero: the ReZero trainer (whole-buffer backward-view reanalysis) and plain MuZero."""
