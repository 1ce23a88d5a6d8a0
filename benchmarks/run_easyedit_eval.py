"""EasyEdit's KnowEdit evaluation (flags of examples/run_knowedit_llama2.py) for any registered method.

Unlearns by default (neutral target_new; ``--target-new keep`` edits as EasyEdit's script does);
see :mod:`zerounlearn_editor.applications.easyedit_eval`. Example::

    EASYEDIT_PATH=/path/to/EasyEdit python benchmarks/run_easyedit_eval.py --editing_method ZeroUnlearn \
        --hparams_dir hparams/ZeroUnlearn/Llama-3.2-3B-Instruct.yaml --data_dir
        KnowEdit/benchmark/wiki_counterfact/test_cf.json \
        --datatype counterfact --ds_size 50 --metrics_save_dir ./output
"""
import logging
import sys

from zerounlearn_editor.applications.easyedit_eval import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main(sys.argv[1:])
