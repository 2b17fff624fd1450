"""The one error type for bad user input: it names the problem and the fix, and the CLI exits 2 on it."""


class UserError(Exception):
    """Bad input from the user (config, task file, tool arguments, model name...).

    The message is one line that says what is wrong and how to fix it; the CLI prints it and exits 2.
    """

    exit_code = 2

    def __init__(self, problem: str, fix: str = ""):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}. {fix}".strip() if fix else problem)
