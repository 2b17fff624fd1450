"""The three short explainers on the page."""

EXPLAINERS = [
    (
        "Why RL for tool-calling agents",
        """
Supervised fine-tuning copies demonstrations; it never sees what happens when the model's own call is wrong.
RL scores the model's *own* episodes, executed for real: a call with a misspelled argument gets a schema error, a
made-up number fails the verifier, and only grounded answers earn completion reward. GRPO needs no value model:
it samples G episodes per prompt and pushes up the ones that beat their group's mean. On a small model the base
policy may never call a tool at all (SmolLM2-135M: 0 of 16 samples), so every group scores the same and there is
nothing to learn from: a short SFT warm start on reference transcripts puts some successes into the groups first.
""",
    ),
    (
        "Reward shaping and reward hacking",
        """
The episode reward is a weighted sum, `F:+1.0 | S:+1.5 | C:+3.0 | L:-0.15`. Every component is a promise the policy
will test: if format alone pays as much as finishing the task, the policy learns well-formed tags around nothing
(the "dummy tags" probe); if a code reward pays for any python block, it learns to write blocks, not programs.
The preflight probes write those hacks by hand and score them *before* training: each must score strictly below
honest work. During training, the hacking alarm fires when training reward climbs significantly (Welch t >= 2)
while held-out verified success does not: the reward is being gamed, not the task solved.
""",
    ),
    (
        "GRPO against PPO",
        """
PPO learns a value function (a second network as large as the policy) to estimate each token's advantage. GRPO
replaces it with the group: advantage = (reward - group mean) / group std over G samples of the same prompt. Both
clip the importance ratio (epsilon) and keep the policy near a reference with a KL penalty (beta). GRPO is cheaper
and suits verifiable rewards, but a group whose rewards are all equal carries no signal at all (frac_zero_std):
prompts that are always solved or never solved waste their samples, and G trades cost against the chance of a
useful group.
""",
    ),
]
