"""DTS: datasets packed into checksummed blocks (tr.data.dts.format), their writer, reader and packer.

    tr-dts pack data/mnist packed/         # packed/train.dts, packed/val.dts
    tr-dts convert mnist_train.dts packed/train.dts   # a seed DTS v3 file into a tr (v4) one
    from tr.data.dts import DtsFile, DtsDataset
"""

from tr.data.dts.convert import Converted, convert
from tr.data.dts.dataset import DtsDataset
from tr.data.dts.format import VERSION, Header
from tr.data.dts.pack import Packed, detect, pack
from tr.data.dts.reader import Block, DtsFile, VerifyReport
from tr.data.dts.unpack import unpack
from tr.data.dts.v3 import V3File
from tr.data.dts.writer import DtsWriter, jpeg_header, raw_header

__all__ = ["VERSION", "Block", "Converted", "DtsDataset", "DtsFile", "DtsWriter", "Header", "Packed", "V3File",
           "VerifyReport", "convert", "detect", "jpeg_header", "pack", "raw_header", "unpack"]
