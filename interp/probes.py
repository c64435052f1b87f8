"""The review openings every interp page probes, besides a run's own prompt: fixed, so that
reports, comparisons and feature pages of different runs measure the same thing."""

REVIEW_PROMPTS: tuple[str, ...] = (
    "I thought this movie was",
    "The acting in this film was",
    "Overall, the story is",
    "The ending of the movie was",
    "This is one of the",
)
