"""The reserved ids and pieces of the shared vocabulary, and the tokenizer's folder name: the one
place they are defined (``tokenization`` re-exports them). Constants only, no TensorFlow, so that
run folders and prepared folders can be checked before TensorFlow loads.

    PAD_ID = 0   padding, never produced by ``tokenize``
    UNK_ID = 1   unknown piece (rare: byte fallback covers characters unseen in training)
    BOS_ID = 2   start of a decoder input sequence ("<s>")
    EOS_ID = 3   end of sequence ("</s>")
"""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
PAD_PIECE = "<pad>"
UNK_PIECE = "<unk>"
BOS_PIECE = "<s>"
EOS_PIECE = "</s>"

#: Folder of the saved tokenizer inside a run directory and a ``pipelines.prepare`` output.
TOKENIZER_DIR = "tokenizer"
