"""Stage two, one unit per method: each module gives its params class and how to train and load
its agent for a run (`pipeline.learn.methods.base.Method`); `pipeline.learn.methods.table` lists them, and
config validation, `train`, `load_agent` and the tests read that one table.

This package's __init__ imports nothing and the table imports a method on use, so that a stage
running one method (pretrain_critic imports erpv; train@<run> its run's method) does not depend
on the others (dvc.yaml's deps follow imports).
"""
