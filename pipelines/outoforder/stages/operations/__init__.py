"""Operating the pipeline: disorder statistics, bronze checks, the main job, reports, storage, maintenance."""
