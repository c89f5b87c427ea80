"""The stream join (QJoin): the job, its evaluation, the stream stage, adaptation, repair and checks."""
