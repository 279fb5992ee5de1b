"""KernelConfig fields grouped by the edges they move: the one list the gate's targeted cases
(``strategies.edges``) and the campaign's profile routing (``strategies.space``) both read."""

from __future__ import annotations

__all__ = ["SEGMENT_FIELDS", "DIM_FIELDS", "SMALL_TABLE_FIELDS", "BOUNDS_FIELDS", "ALL_GROUPS"]

# routing and chunking: the segment-length edges (a run of threshold-1, threshold, threshold+1)
SEGMENT_FIELDS = frozenset({
    "long_run_threshold", "chunk_size", "fused_long_tier", "fused_long_min_lookups", "fence",
    "bwd_long_gather", "bwd_long_num_warps", "bwd_long_stages", "bwd_long_vector", "long_grid_multiplier",
    "classify_block",
    "hoist_transpose", "index_dtype",
})
# gather widths and buckets: the D and bag-length edges
DIM_FIELDS = frozenset({
    "dim_buckets", "fwd_gather_unweighted", "fwd_gather_weighted", "bwd_short_gather_unweighted",
    "bwd_short_gather_weighted", "bwd_long_gather", "fwd_bags_per_program", "fwd_num_warps",
    "bwd_short_num_warps", "short_grid_multiplier", "fwd_bucket_tiles", "bwd_short_runs_per_program",
    "fwd_one_bag_pooling", "bwd_short_bucket_runs",
})
# what moves a single fp16 table on or off the small-table path, or changes its kernel
SMALL_TABLE_FIELDS = frozenset({
    "small_table_path", "small_table_max_rows", "small_table_min_dim", "small_table_max_dim",
    "small_table_min_pooling", "small_table_bags_per_program", "small_table_histogram_ids", "small_table_backward",
})
# what changes a bad-id case's run: it stops after the bounds check and the forward
BOUNDS_FIELDS = frozenset({"fused_bounds_check", "bounds_check_block"})
ALL_GROUPS = SEGMENT_FIELDS | DIM_FIELDS | SMALL_TABLE_FIELDS | BOUNDS_FIELDS
