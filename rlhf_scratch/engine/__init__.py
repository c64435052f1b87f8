"""engine: everything that runs a trainer. The phase loop (`loop`), the trainer base every
algorithm subclasses (`trainer`) and the contract the loop reads (`contract`), the run folder
(`runs`), a run's args from the train command's flags (`run_args`), checkpoints and resume
(`checkpoint`, `lifecycle`), the logger, the optimiser, the processes (`distributed`, `accel`,
`run_setup`). Imports `reward`, `rollout`, `models`, `core`, `config`; never an algorithm by name
(the registry names them).
"""
