#!/bin/sh
# Regenerates the optimizer's test images (internal/optimize/image_test.go)
# from scikit-image's sample photographs (python3-skimage, public domain or
# CC0: /usr/share/doc/python3-skimage/copyright) and the default corpus's
# spinner.gif. Needs imagemagick, libimage-exiftool-perl, python3-skimage, python3-pil.
set -eu
S=/usr/lib/python3/dist-packages/skimage/data
D=$(dirname "$0")
cd "$D"
convert "$S/chelsea.png" -strip -quality 85 photo.jpg                       # baseline JPEG photo, 451x300
convert "$S/coffee.png" -strip -resize 400x -interlace JPEG -quality 85 progressive.jpg
convert "$S/chelsea.png" -strip -colorspace CMYK -quality 85 cmyk.jpg        # CMYK JPEG, no profile
convert "$S/astronaut.png" -strip -resize 400x300! -quality 85 rotated.jpg
exiftool -q -overwrite_original -n -Orientation=6 rotated.jpg                # stored 400x300, shown 300x400
convert "$S/coffee.png" -strip -resize 300x -alpha set -channel A -fx "i/w" png32:alpha.png  # photo fading to transparent
convert "$S/coffee.png" -strip -resize 300x -colors 64 png8:palette.png     # palette PNG
convert "$S/horse.png" -strip -resize 200x static.gif                         # static GIF
cp ../../../testbed/corpus/default/site/yahoo/www.yahoo.com/i/spinner.gif animated.gif
convert -size 10000x5000 xc:white -depth 1 bomb.png                         # 50 megapixels in a few KB
cp ../../../testbed/corpus/default/site/yahoo/www.yahoo.com/p.gif small.gif  # a 1x1 spacer GIF (43 bytes): WebP cannot save 10 %
# corrupt: photo.jpg with 2 KB of its entropy-coded data overwritten
cp photo.jpg corrupt.jpg
dd if=/dev/zero of=corrupt.jpg bs=1 seek=4000 count=2048 conv=notrunc status=none
# truncated: the first half of alpha.png
head -c $(( $(stat -c %s alpha.png) / 2 )) alpha.png > truncated.png
# starfield: fine detail on a dark field (issue 27), a crop of the Hubble deep field
# (NASA, public domain; scikit-image's hubble_deep_field.jpg), re-saved at q95 by Pillow
/usr/bin/python3 -c "from PIL import Image; Image.open('$S/hubble_deep_field.jpg').crop((550, 0, 950, 300)).save('starfield.jpg', quality=95)"
