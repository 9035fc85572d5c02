# resign_manifest.py MANIFEST: sets manifest_crc32 to the checksum of the edited bytes before it
# (docs/formats.md), so that a case tests the manifest's other checks rather than its checksum.
import sys
import zlib

text = open(sys.argv[1], "rb").read()
body = text[:text.rindex(b',"manifest_crc32":')]
open(sys.argv[1], "wb").write(body + b',"manifest_crc32":%d}' % zlib.crc32(body))
