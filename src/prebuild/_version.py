# The release version. Built wheels add a local label naming CUDA and archs
# (0.1.0+cu130.sm80); prebuild.__version__ reports the installed one.
BASE_VERSION = "0.1.0"
